package store

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// memTx is a Tx over a map, for the stage's own test.
type memTx struct{ m map[string][]byte }

func (t memTx) Get(b, k []byte) []byte { return t.m[stageKey(b, k)] }
func (t memTx) Gets(b []byte, ks [][]byte) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = t.Get(b, k)
	}
	return out
}
func (t memTx) Put(b, k, v []byte) error { t.m[stageKey(b, k)] = v; return nil }
func (t memTx) Delete(b, k []byte) error { delete(t.m, stageKey(b, k)); return nil }
func (t memTx) Scan(b, from []byte, fn func(k, v []byte) (bool, error)) error {
	var keys []string
	for sk := range t.m {
		if bk, k, _ := strings.Cut(sk, "\x00"); bk == string(b) && k >= string(from) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if more, err := fn([]byte(k), t.m[stageKey(b, []byte(k))]); !more || err != nil {
			return err
		}
	}
	return nil
}
func (memTx) NextSeq() (uint64, error) { return 0, nil }
func (memTx) Release([]byte)           {}
func (memTx) Err() error               { return nil }
func (memTx) Damaged() []Damage        { return nil }
func (t memTx) Raw(b, k []byte) []byte { return t.Get(b, k) }

// A scan through the stage gives the transaction's keys with the staged
// changes merged in, in order: a put new or over a key, a delete; and it
// stops where fn says.
func TestStageScanMergesItsChanges(t *testing.T) {
	tx := memTx{m: map[string][]byte{}}
	b := []byte("bucket")
	for _, k := range []string{"b", "d", "f"} {
		tx.Put(b, []byte(k), []byte("old "+k))
	}
	tx.Put([]byte("other"), []byte("c"), []byte("not this bucket"))
	s := &stage{Tx: tx, latest: map[string]int{}}
	s.Put(b, []byte("a"), []byte("new a"))
	s.Put(b, []byte("d"), []byte("new d"))
	s.Delete(b, []byte("f"))
	s.Put(b, []byte("e"), []byte("new e"))
	s.Put(b, []byte("g"), []byte("new g"))
	scan := func(from string, most int) string {
		var out []string
		if err := s.Scan(b, []byte(from), func(k, v []byte) (bool, error) {
			out = append(out, fmt.Sprintf("%s=%s", k, v))
			return len(out) < most, nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, ",")
	}
	if got, want := scan("", 100), "a=new a,b=old b,d=new d,e=new e,g=new g"; got != want {
		t.Fatalf("scan: %s; want %s", got, want)
	}
	if got, want := scan("c", 2), "d=new d,e=new e"; got != want {
		t.Fatalf("scan from c, 2 keys: %s; want %s", got, want)
	}
	if got, want := scan("", 1), "a=new a"; got != want {
		t.Fatalf("scan of 1 key: %s; want %s", got, want)
	}
	if v := s.Get(b, []byte("f")); v != nil || !bytes.Equal(tx.Get(b, []byte("f")), []byte("old f")) {
		t.Fatalf("a staged delete: %q through the stage, %q below", v, tx.Get(b, []byte("f")))
	}
	if err := s.commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok := tx.m[stageKey(b, []byte("f"))]; ok || string(tx.Get(b, []byte("d"))) != "new d" {
		t.Fatal("commit did not make the staged changes")
	}
}
