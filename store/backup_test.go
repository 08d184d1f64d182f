package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// backupStream builds a backup by hand: magic, header, records (bucket,
// key, value), the trailer with count and checksum.
func backupStream(magic, header string, count int, records ...[3]string) []byte {
	var b []byte
	field := func(s string) { b = append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b = append(b, magic...)
	field(header)
	for _, r := range records {
		b = append(b, 'r')
		for _, f := range r {
			field(f)
		}
	}
	b = binary.AppendUvarint(append(b, 'e'), uint64(count))
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// A backup that is not whole is refused before anything is written, and
// the error says what is wrong with it.
func TestCheckBackupNamesTheDamage(t *testing.T) {
	rec := [3]string{string(BucketJobs), "k", "v"}
	good := backupStream(BackupMagic, `{"format":1}`, 1, rec)
	if st, err := CheckBackup(bytes.NewReader(good)); err != nil || st.Jobs != 1 || st.Records != 1 {
		t.Fatalf("a whole backup: %+v, %v", st, err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	inRecord := bytes.Clone(good)
	inRecord[bytes.LastIndexByte(inRecord, 'k')] = 'K'
	hugeField := append([]byte(BackupMagic), binary.AppendUvarint(nil, 1<<30)...) // a header said to be 1 GiB
	hugeValue := backupStream(BackupMagic, `{"format":1}`, 1)
	hugeValue = append(hugeValue[:len(hugeValue)-sha256.Size-2], 'r', 4, 'j', 'o', 'b', 's', 1, 'k')
	hugeValue = append(binary.AppendUvarint(hugeValue, 1<<31), "only this"...)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"not a backup", []byte("hello world, this is not it"), "does not start with"},
		{"empty", nil, "does not start with"},
		{"a newer format", backupStream(BackupMagic, `{"format":3}`, 1, rec), "format 3; this binary reads formats 1 and 2"},
		{"a header that does not read", backupStream(BackupMagic, `{"format":`, 1, rec), "header does not read"},
		{"an unknown bucket", backupStream(BackupMagic, `{"format":1}`, 1, [3]string{"nope", "k", "v"}), `unknown bucket "nope"`},
		{"a wrong count", backupStream(BackupMagic, `{"format":1}`, 2, rec), "says 2 records, it holds 1"},
		{"a flipped checksum byte", flipped, "checksum does not match"},
		{"a changed byte in a record", inRecord, "checksum does not match"},
		{"cut short", good[:len(good)/2], "cut short"},
		{"cut in the checksum", good[:len(good)-5], "cut short in its checksum"},
		{"bytes after its end", append(bytes.Clone(good), 0), "bytes after its end"},
		{"a header over its bound", hugeField, "over"},
		{"a field's length past the file", hugeValue, "cut short in a field of 2147483648 bytes"},
	} {
		_, err := CheckBackup(bytes.NewReader(c.data))
		if !errors.Is(err, ErrBadBackup) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrBadBackup saying %q", c.name, err, c.want)
		}
	}
}

// BenchmarkCheckBackup: checking a backup of 100,000 small records (a
// job's record is about 200 bytes).
func BenchmarkCheckBackup(b *testing.B) {
	recs := make([][3]string, 100_000)
	for i := range recs {
		recs[i] = [3]string{string(BucketJobs), strings.Repeat("k", 36), strings.Repeat("v", 200)}
	}
	data := backupStream(BackupMagic, `{"format":1}`, len(recs), recs...)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CheckBackup(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
