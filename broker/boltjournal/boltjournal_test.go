package boltjournal_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
)

// A broker given Open keeps its jobs in the bbolt file in its DataDir; one
// given no opener says what to set.
func TestOpen(t *testing.T) {
	opts := broker.DefaultOptions()
	opts.DataDir = filepath.Join(t.TempDir(), "made")
	if _, err := broker.New(opts); err == nil || !strings.Contains(err.Error(), "OpenJournal") {
		t.Fatalf("New without OpenJournal: %v, want an error naming OpenJournal", err)
	}
	opts.OpenJournal = boltjournal.Open
	b, err := broker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, broker.JournalFile)); err != nil {
		t.Fatalf("the journal file: %v", err)
	}
	opts.DataDir = ""
	if _, err := broker.New(opts); err == nil || !strings.Contains(err.Error(), "data-dir") {
		t.Fatalf("an empty DataDir: %v", err)
	}
}
