package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/eventmq/emq/store"
)

// Backups through the admin API: GET /api/v1/backup[?pace=BYTES]
// streams the journal as one moment (store.Backuper's format), with the
// full admin token only: a backup holds every job's payload (and so, with
// no token set, only where payloads are shown: payloads.go).

// madeBy names what makes a backup: the program, its version and host.
func madeBy(what string) string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("emq %s on %s, %s", v, host, what)
}

// DefaultBackupPace is the pace of a backup through the API unless the
// request says otherwise: measured, a backup of a million jobs at full
// speed cost a serving broker most of its throughput on two cores; at
// this pace, a few per cent (docs/benchmarks.md).
const DefaultBackupPace = 32 << 20

func (l *Live) Backup(ctx context.Context, w io.Writer, pace int64) (store.BackupStats, error) {
	return l.b.Backup(ctx, w, store.BackupHeader{MadeBy: madeBy("a running broker"), Pace: pace})
}

func (o *Offline) Backup(_ context.Context, w io.Writer, pace int64) (store.BackupStats, error) {
	bk, ok := o.j.(store.Backuper)
	if !ok {
		return store.BackupStats{}, fmt.Errorf("the journal %T cannot back itself up: %w", o.j, errors.ErrUnsupported)
	}
	return bk.Backup(w, store.BackupHeader{MadeBy: madeBy("offline"), Pace: pace})
}

// Backup downloads a running broker's backup into w, with no timeout but
// ctx's. It says only how many bytes came: check them (store.CheckBackup)
// before trusting them.
func (c *Client) Backup(ctx context.Context, w io.Writer, pace int64) (store.BackupStats, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/backup?pace="+strconv.FormatInt(pace, 10), nil)
	if err != nil {
		return store.BackupStats{}, err
	}
	stream := *c.http
	stream.Timeout = 0
	resp, err := c.do(&stream, req)
	if err != nil {
		return store.BackupStats{}, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	return store.BackupStats{Bytes: n}, err
}

func (s *Server) backupRoute(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/backup", func(w http.ResponseWriter, r *http.Request) {
		pace := int64(DefaultBackupPace)
		if v := r.URL.Query().Get("pace"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				refuse(w, http.StatusBadRequest, "bad_filter", fmt.Sprintf("pace %q: want bytes a second, 0 for as fast as it goes", v))
				return
			}
			pace = n
		}
		if !s.showsPayloads(r) { // the read-only token is refused before (authorize)
			s.hidePayload(w)
			return
		}
		s.with(w, func(a API) {
			s.payloadRead(r, "", "", "every payload and result (a backup)")
			name := "emq-" + time.Now().UTC().Format("20060102-150405") + ".emqbackup"
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
			sw := &sentWriter{ResponseWriter: w}
			if _, err := a.Backup(r.Context(), sw, pace); err != nil {
				if !sw.sent { // nothing went yet: the error can
					w.Header().Del("Content-Disposition")
					fail(w, fmt.Errorf("backup: %w", err))
					return
				}
				// Past the first bytes the status is sent: the stream ends
				// without its checksum, which a restore refuses.
				s.opts.Logger.Error("backup failed; the stream sent is cut short", "err", err)
				panic(http.ErrAbortHandler)
			}
		})
	})
}

// sentWriter notes whether anything was written to the response.
type sentWriter struct {
	http.ResponseWriter
	sent bool
}

func (w *sentWriter) Write(p []byte) (int, error) {
	w.sent = w.sent || len(p) > 0
	return w.ResponseWriter.Write(p)
}
