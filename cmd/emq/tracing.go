package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
	"github.com/eventmq/emq/internal/otelenv"
)

// tracerProvider is the command's OpenTelemetry tracer provider from the
// OTEL_* variables (internal/otelenv), nil when they ask for none; stop
// exports what waits, for up to 5 s.
func tracerProvider(service string, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	p, err := otelenv.New(context.Background(), service)
	if err != nil || p == nil {
		return nil, func() {}, err
	}
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	log.Info("tracing: spans of jobs go to OpenTelemetry's OTLP exporter", "endpoint", endpoint,
		"sampler", os.Getenv("OTEL_TRACES_SAMPLER"))
	return p, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			log.Warn("tracing: spans not exported at exit", "err", err)
		}
	}, nil
}

// traceFromEnv returns ctx in the trace that TRACEPARENT and TRACESTATE
// name, as a traced script or an emq worker --exec command has them;
// ctx as it is without them.
func traceFromEnv(ctx context.Context) context.Context {
	tp := os.Getenv("TRACEPARENT")
	if tp == "" {
		return ctx
	}
	h := emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTraceparent, Value: tp},
		emqp.Header{Name: emqp.HeaderTracestate, Value: os.Getenv("TRACESTATE")})
	return jobtrace.Extract(ctx, h)
}
