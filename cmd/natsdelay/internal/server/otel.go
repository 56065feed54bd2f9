package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/natsdelay/natsdelay/bridge"
)

// otelShutdownWait bounds the flush of the spans still queued when the
// server stops: an exporter whose collector is gone must not hold the
// stop up.
var otelShutdownWait = 5 * time.Second // a variable for a test to shorten

// startTracing builds the tracer provider of Options.OTel: spans batched
// and exported over OTLP/HTTP, as the standard OTEL_EXPORTER_OTLP_*
// variables say (endpoint, headers, TLS, timeout; by default
// http://localhost:4318), sampled as OTEL_TRACES_SAMPLER says (by
// default, as the publisher's span was), with the resource
// service.name=natsdelay unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise. The SDK reads the variables;
// nothing here reads them again. It pushes the provider's shutdown,
// which flushes what is queued within otelShutdownWait, and returns
// the service's option.
func (s *Server) startTracing(ctx context.Context) (bridge.Option, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "natsdelay")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, errors.Join(fmt.Errorf("OpenTelemetry: the resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// NB: the SDK reports a failed export to the global handler, which
	// would print to stderr; it goes to the server's log instead.
	otel.SetErrorHandler(otelErrors{s.log})
	s.push("OpenTelemetry tracer provider", func() error {
		sctx, cancel := context.WithTimeout(context.Background(), otelShutdownWait)
		defer cancel()
		// NB: spans not flushed in time are dropped, as a failed export
		// is while serving; the stop itself did not fail.
		if err := tp.Shutdown(sctx); err != nil {
			s.log.Warn("OpenTelemetry: spans still queued at the stop were dropped", "err", err)
		}
		return nil
	})
	return bridge.WithTracerProvider(tp), nil
}

// otelErrors logs what the OpenTelemetry SDK reports: spans it could not
// export. Tracing is best effort; delivery never waits for it.
type otelErrors struct{ log *slog.Logger }

func (h otelErrors) Handle(err error) {
	h.log.Warn("OpenTelemetry: exporting spans failed; they are dropped", "err", err)
}
