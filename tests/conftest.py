"""Settings for every test: hypothesis without clocks.

The suite runs a test file per core, beside end-to-end stacks and image builds that keep those cores busy, so how
long hypothesis takes to draw or run an example says more about the neighbours than about the code. A deadline or a
"generation is slow" health check is a timed assertion, which no unit test makes (speed lives in bench/): both are
off. Every other health check stays."""

from hypothesis import HealthCheck, settings

settings.register_profile("gpu-pulse", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile("gpu-pulse")
