package boltstore

// MemtableBytes is what the memtable holds, roughly (item.size).
func (j *Journal) MemtableBytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.memBytes
}

// CheckpointNow freezes the memtable, on the committer, and writes it
// into bbolt, as the checkpointer does.
func (j *Journal) CheckpointNow() error {
	done := make(chan error, 1)
	j.Core.Alone(func() { j.freeze(); done <- nil }, func(err error) { done <- err })
	if err := <-done; err != nil {
		return err
	}
	return j.checkpoint()
}

// BetweenCheckpointTxs has fn called after each transaction of a
// checkpoint but the last.
func (j *Journal) BetweenCheckpointTxs(fn func()) {
	j.mu.Lock()
	j.betweenTxs = fn
	j.mu.Unlock()
}

// CheckpointTxBytes sets how many bytes of values one transaction of a
// checkpoint takes.
func (j *Journal) CheckpointTxBytes(n int64) {
	j.mu.Lock()
	j.txBytes = n
	j.mu.Unlock()
}
