// Package otelenv makes an EMQ command's OpenTelemetry tracer provider
// from the standard OTEL_* environment variables, as every OpenTelemetry
// SDK reads them:
//
//   - Tracing is on when an OTLP endpoint is named
//     (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
//     or OTEL_TRACES_EXPORTER=otlp, and off otherwise, with
//     OTEL_TRACES_EXPORTER=none, or with OTEL_SDK_DISABLED=true.
//   - OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL): http/protobuf
//     (the default, port 4318) or grpc (port 4317). The exporter reads the
//     rest itself: endpoints, headers, timeouts, certificates, insecure.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler
//     (default parentbased_always_on: a job is traced when its sender's
//     trace is sampled, and every job that comes without one);
//     OTEL_BSP_* size the batch of spans waiting for export
//     (OTEL_BSP_MAX_QUEUE_SIZE, default 2048 spans: past it spans are
//     dropped, never waited for).
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the process
//     (by default emq-broker, emq-worker, emq-client).
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Provider is a tracer provider with its way to stop: Shutdown exports
// the spans that wait and stops the exporter.
type Provider struct {
	trace.TracerProvider
	Shutdown func(context.Context) error
}

// Enabled reports whether the environment asks for traces.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New returns the tracer provider the environment asks for, named
// service unless OTEL_SERVICE_NAME says otherwise; nil when tracing is
// off. A variable with a value it cannot use is an error naming it.
func New(ctx context.Context, service string) (*Provider, error) {
	if !Enabled() {
		return nil, nil
	}
	if err := check(); err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol() {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry's OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Shutdown: tp.Shutdown}, nil
}

func protocol() string {
	if p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); p != "" {
		return p
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
}

// check refuses, by name, the values the SDK would only log about and
// then ignore.
func check() error {
	if exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" && exp != "none" {
		return fmt.Errorf("OTEL_TRACES_EXPORTER=%q: EMQ exports traces with otlp, or none", exp)
	}
	if p := protocol(); p != "" && p != "grpc" && p != "http/protobuf" {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: EMQ speaks grpc or http/protobuf", p)
	}
	sampler := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER"))
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if arg := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
			if err != nil || r < 0 || r > 1 {
				return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: the ratio of traces sampled is a number from 0 to 1", arg)
			}
		}
	default:
		return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", sampler)
	}
	return nil
}
