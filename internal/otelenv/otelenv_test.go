package otelenv_test

import (
	"context"
	"strings"
	"testing"

	"github.com/eventmq/emq/internal/otelenv"
)

var vars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"}

func setenv(t *testing.T, kv ...string) {
	for _, v := range vars {
		t.Setenv(v, "")
	}
	for i := 0; i < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// Tracing is off unless the environment names an exporter's endpoint or
// asks for otlp, and off whenever it says none or disables the SDK.
func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, true},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER", "none"}, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318", "OTEL_SDK_DISABLED", "true"}, false},
	} {
		setenv(t, tc.env...)
		if got := otelenv.Enabled(); got != tc.want {
			t.Errorf("%v: Enabled %v; want %v", tc.env, got, tc.want)
		}
		p, err := otelenv.New(context.Background(), "emq-test")
		if err != nil || (p != nil) != tc.want {
			t.Errorf("%v: New %v, %v; want a provider: %v", tc.env, p, err, tc.want)
		}
		if p != nil {
			p.Shutdown(context.Background())
		}
	}
}

// A value the SDK would only log about and ignore is refused, naming the
// variable.
func TestBadValuesNamed(t *testing.T) {
	for _, tc := range [][]string{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"OTEL_TRACES_SAMPLER", "sometimes"},
		{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1.5"},
		{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "half"},
	} {
		setenv(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, tc...)...)
		_, err := otelenv.New(context.Background(), "emq-test")
		if err == nil || !strings.Contains(err.Error(), tc[len(tc)-2]) {
			t.Errorf("%v: %v; want an error naming %s", tc, err, tc[len(tc)-2])
		}
	}
	setenv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
		"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.01")
	p, err := otelenv.New(context.Background(), "emq-test")
	if err != nil || p == nil {
		t.Fatalf("grpc at 1%%: %v, %v", p, err)
	}
	p.Shutdown(context.Background())
}
