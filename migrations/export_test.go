package migrations

// For the tests: a small chunk, and one chunk at a time.
var SealOne = sealOne

func SetSealChunk(n int) (restore func()) {
	old := sealChunk
	sealChunk = n
	return func() { sealChunk = old }
}
