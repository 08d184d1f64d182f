module github.com/eventmq/emq

go 1.26

require (
	github.com/google/uuid v1.6.0
	go.etcd.io/bbolt v1.5.0
)

require golang.org/x/sys v0.45.0 // indirect
