module github.com/eventmq/emq

go 1.26

require (
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/google/uuid v1.6.0
	go.etcd.io/bbolt v1.5.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.15.0 // indirect
)
