"""prometheus-adapter's configuration, read as it is and served beside gpu-pulse's own metrics.

The file prometheus-adapter's `--config` takes (kubernetes-sigs/prometheus-adapter pkg/config/config.go): `rules`
(custom.metrics.k8s.io) and `externalRules` (external.metrics.k8s.io), discovered from Prometheus every
`--metrics-relist-interval` and answered by each rule's `metricsQuery`, with the semantics of prometheus-adapter's Go
code, cited beside each piece: `config` reads the file, `goregexp` and `gotemplate` are the parts of Go's regexp and
text/template the rules use, `restmapper` knows Kubernetes' resources, `resources` maps labels to resources, `query`
builds the PromQL, `naming` turns a rule into its namer, `registry` keeps what discovery found, `promapi` speaks the
Prometheus HTTP API, `discovery` relists, and `serving` answers the API's questions.
"""
