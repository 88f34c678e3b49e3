"""How both services reach the Kubernetes API: an `ApiClient` from a base URL (tests, demo), a kubeconfig, or the
in-cluster service account, in that order of preference. Importing this module imports the `kubernetes` client (tens
of megabytes): the exporter imports it only when it talks to the API.

A kubeconfig, and the certificate, key and token files it names, are read here through the bounded reader
(toolkit/inputfiles.py) and handed to the client inline: the client itself would open a FIFO and wait forever, or read
`/dev/zero` until memory runs out.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration

from toolkit.inputfiles import InputFileError, read_input_file

# Fields of a kubeconfig that name a file, and the field that holds the same content inline (kubectl's names).
_FILE_FIELDS = {
    "clusters": (("certificate-authority", "certificate-authority-data", True),),
    "users": (
        ("client-certificate", "client-certificate-data", True),
        ("client-key", "client-key-data", True),
        ("tokenFile", "token", False),
    ),
}


class KubeConnectionError(ValueError):
    """No usable way to reach the Kubernetes API; the message is one line that names the flag to fix."""


def api_client(
    *,
    base_url: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    token: str | None = None,
    ca_file: Path | None = None,
    verify_tls: bool | None = None,
    in_cluster_flag: str = "--kubeconfig",
) -> ApiClient:
    """`base_url` (with optional bearer `token` and `ca_file`) wins; then `kubeconfig`; then in-cluster config.

    `base_url` may also be combined with `kubeconfig`, to take credentials from the file and talk to another URL.
    An unusable kubeconfig is blamed on `--kubeconfig`; a missing in-cluster configuration on `in_cluster_flag`, the
    flag that asked for the API without a kubeconfig.
    """
    configuration = Configuration()
    try:
        if kubeconfig is not None:
            kube_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                kubeconfig_dict(kubeconfig), context=context, client_configuration=configuration, persist_config=False
            )
        elif base_url is None:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except InputFileError as e:
        raise KubeConnectionError(str(e)) from None
    except UnicodeDecodeError:
        raise KubeConnectionError(f"--kubeconfig {kubeconfig}: not UTF-8 text") from None
    except OSError as e:
        if kubeconfig is not None:
            raise KubeConnectionError(f"--kubeconfig {kubeconfig}: cannot read: {e.strerror or e}") from None
        raise KubeConnectionError(
            f"{in_cluster_flag}: cannot use the in-cluster configuration (outside a cluster, give --kubeconfig): "
            f"{_first_line(e)}"
        ) from None
    except (
        kube_config.ConfigException,
        yaml.YAMLError,
        RecursionError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    ) as e:
        detail = _first_line(e)
        if kubeconfig is not None:
            raise KubeConnectionError(f"--kubeconfig {kubeconfig}: cannot use it: {detail}") from None
        raise KubeConnectionError(
            f"{in_cluster_flag}: cannot use the in-cluster configuration (outside a cluster, give --kubeconfig): "
            f"{detail}"
        ) from None
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


def kubeconfig_dict(path: Path) -> dict[str, Any]:
    """The kubeconfig at `path` as the client loads it, every file it names read (bounded) into the field that holds
    the same content inline; relative paths are relative to the kubeconfig's directory, as kubectl reads them.
    InputFileError (naming --kubeconfig and the file), UnicodeDecodeError, yaml.YAMLError, ValueError."""
    config = yaml.safe_load(read_input_file(path, "--kubeconfig").decode("utf-8"))
    if not isinstance(config, dict):
        raise ValueError("not a kubeconfig (a YAML mapping)")
    for section, fields in _FILE_FIELDS.items():
        for entry in config.get(section) or ():
            inner = entry.get(section[:-1]) if isinstance(entry, dict) else None
            if not isinstance(inner, dict):
                continue
            for named, inline, encoded in fields:
                name = inner.get(named)
                if not isinstance(name, str) or not name or inner.get(inline):
                    continue
                data = read_input_file(path.parent / name, f"--kubeconfig {path}: {named}")
                inner[inline] = base64.b64encode(data).decode() if encoded else data.decode("utf-8").strip()
                del inner[named]
    return config


def _first_line(error: Exception) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
