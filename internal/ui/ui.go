// Package ui holds the dashboard's files (HTML, CSS, JavaScript and the
// vendored chart library), embedded in the binary; package admin serves them
// under /ui/ on the admin listener (admin/dashboard.go).
//
// Nothing is built: the files are served as they are written here. The
// one library is Chart.js 3.9.1 (MIT licence, static/vendor/LICENSE.chartjs),
// the build Debian ships as libjs-chart.js.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Files are the dashboard's files, index.html at the root.
var Files, _ = fs.Sub(static, "static")
