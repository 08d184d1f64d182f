package broker

import (
	"strings"
	"time"

	"github.com/eventmq/emq/store"
)

// ReloadJournalKeys makes k the journal's keys (SIGHUP): its first key
// seals every value written from now on. Keys without one the journal
// still needs are refused, naming it; the old keys stay.
func (b *Broker) ReloadJournalKeys(k *store.Keyring) error {
	if err := b.journal.SetKeys(k); err != nil {
		return err
	}
	if k != nil {
		b.log.Info("journal keys re-read: what is written from now on is sealed under the first",
			"key", k.Names()[0], "keys", strings.Join(k.Names(), ","), "file", k.File())
	}
	return nil
}

// Rekey starts sealing again, under the journal's first key, what it
// holds under older keys, at most rate values a second (0: the default;
// store.Core.Rekey). It returns at once; RekeyStatus tells the progress,
// and the log says when it ends.
func (b *Broker) Rekey(rate int) (store.RekeyStatus, error) {
	s, err := b.journal.Rekey(rate)
	if err != nil {
		return s, err
	}
	b.log.Info("journal rekey: sealing again under the first key what is under older ones", "key", s.Key, "rate", s.Rate)
	b.watchRekey()
	return s, nil
}

// RekeyStatus is the journal's rekey progress.
func (b *Broker) RekeyStatus() store.RekeyStatus { return b.journal.RekeyStatus() }

// watchRekey logs the end of a rekey under way, once.
func (b *Broker) watchRekey() {
	if !b.rekeyWatched.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer b.rekeyWatched.Store(false)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-b.done:
				return
			case <-t.C:
			}
			s := b.journal.RekeyStatus()
			if s.Running {
				continue
			}
			if !s.Finished.IsZero() {
				b.log.Info("journal rekey finished: every value is under the first key", "key", s.Key, "resealed", s.Resealed,
					"took", s.Finished.Sub(s.Started).Round(time.Millisecond), "keys_no_longer_needed", strings.Join(s.Dropped, ","))
			}
			return
		}
	}()
}
