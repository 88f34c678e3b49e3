"""How the adapter reaches the Kubernetes API: an `ApiClient` from a base URL (tests, demo), a kubeconfig, or the
in-cluster service account, in that order of preference."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration


class KubeConnectionError(ValueError):
    """No usable way to reach the Kubernetes API; the message is one line."""


def api_client(
    *,
    base_url: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    token: str | None = None,
    ca_file: Path | None = None,
    verify_tls: bool | None = None,
) -> ApiClient:
    """`base_url` (with optional bearer `token` and `ca_file`) wins; then `kubeconfig`; then in-cluster config.

    `base_url` may also be combined with `kubeconfig`, to take credentials from the file and talk to another URL.
    """
    configuration = Configuration()
    try:
        if kubeconfig is not None:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), context=context, client_configuration=configuration, persist_config=False
            )
        elif base_url is None:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except kube_config.ConfigException as e:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration (use --kubeconfig outside)"
        raise KubeConnectionError(f"cannot use the {where}: {str(e).splitlines()[0]}") from None
    except OSError as e:
        raise KubeConnectionError(f"--kubeconfig {kubeconfig}: cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, AttributeError, TypeError) as e:
        # the kubernetes client reads a binary or malformed file without a ConfigException of its own
        problem = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else "not a kubeconfig"
        raise KubeConnectionError(f"--kubeconfig {kubeconfig}: {problem}") from None
    if base_url is not None:
        configuration.host = base_url.rstrip("/")
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    if ca_file is not None:
        configuration.ssl_ca_cert = str(ca_file)
    if verify_tls is not None:
        configuration.verify_ssl = verify_tls
    return ApiClient(configuration)
