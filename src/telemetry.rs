//! Structured JSON logs on stderr, and OpenTelemetry traces over OTLP/HTTP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set (nothing is exported otherwise).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

/// Keeps the exporter alive; flushes pending spans when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset.
pub fn init(default_filter: &str, otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt::layer().json().with_current_span(true).with_span_list(true).with_writer(std::io::stderr);
    // The exporter reads the endpoint and headers from the standard OTEL_* variables; its
    // default blocking HTTP client works whether or not a runtime exists yet.
    let provider = match otlp_endpoint {
        Some(_) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(Resource::builder().with_service_name("gatehouse").build())
                    .build(),
            )
        }
        None => None,
    };
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("gatehouse")));
    tracing_subscriber::registry().with(filter).with(fmt).with(otel).try_init()?;
    Ok(Telemetry { provider })
}
