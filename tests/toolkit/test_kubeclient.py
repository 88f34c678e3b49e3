"""Building the Kubernetes ApiClient one way for both services: base URL, kubeconfig, in-cluster; errors as one line
that names the flag to fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolkit.certs import CertificateAuthority
from toolkit.kubeclient import KubeConnectionError, api_client


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: test, user: {token: from-the-file}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    return path


def test_a_base_url_needs_no_configuration() -> None:
    client = api_client(base_url="http://127.0.0.1:8001/", token="t0k", verify_tls=False)
    configuration = client.configuration
    assert configuration.host == "http://127.0.0.1:8001"
    assert configuration.api_key == {"authorization": "t0k"}
    assert configuration.api_key_prefix == {"authorization": "Bearer"}
    assert configuration.verify_ssl is False


def test_a_kubeconfig_gives_server_and_credentials(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", "https://kube.example:6443")
    configuration = api_client(kubeconfig=kubeconfig).configuration
    assert configuration.host == "https://kube.example:6443"
    assert configuration.api_key == {"BearerToken": "Bearer from-the-file"}
    elsewhere = api_client(kubeconfig=kubeconfig, base_url="http://127.0.0.1:9/").configuration
    assert elsewhere.host == "http://127.0.0.1:9"
    assert elsewhere.api_key == {"BearerToken": "Bearer from-the-file"}


def test_no_service_account_blames_the_flag_that_asked_for_the_api() -> None:
    with pytest.raises(KubeConnectionError, match=r"^--kubeconfig: cannot use the in-cluster configuration") as default:
        api_client()  # no service account here
    with pytest.raises(KubeConnectionError, match=r"^--kubernetes: cannot use the in-cluster configuration") as named:
        api_client(in_cluster_flag="--kubernetes")
    for error in (default, named):
        assert "\n" not in str(error.value)
        assert "give --kubeconfig" in str(error.value)


@pytest.mark.parametrize(
    "content",
    [None, "", "kind: Config\nclusters: []\n", "just text", "{unbalanced: [", "- a\n- list\n"],
    ids=["missing", "empty", "no-clusters", "scalar", "bad-yaml", "a-list"],
)
def test_an_unusable_kubeconfig_is_one_line_naming_the_flag_and_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KubeConnectionError) as error:
        api_client(kubeconfig=path)
    message = str(error.value)
    problem = "cannot read: No such file" if content is None else "cannot use it: "
    assert message.startswith(f"--kubeconfig {path}: {problem}")
    assert "\n" not in message


def test_a_directory_as_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(KubeConnectionError, match=rf"^--kubeconfig {tmp_path}: not a regular file \(a directory\)"):
        api_client(kubeconfig=tmp_path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_kubeconfig_that_is_no_regular_file_is_one_line_never_a_hang(tmp_path: Path, special: str) -> None:
    path = tmp_path / "kubeconfig" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)  # opened the ordinary way, it would wait for a writer forever
    with pytest.raises(KubeConnectionError, match=rf"^--kubeconfig {path}: not a regular file"):
        api_client(kubeconfig=path)


@pytest.mark.timeout(30)
def test_files_a_kubeconfig_names_are_read_bounded_and_relative_to_it(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("cluster")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "token").write_text("from-a-token-file\n")
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        "clusters: [{name: test, cluster: {server: 'https://kube.example:6443', certificate-authority: ca.crt}}]\n"
        "users: [{name: test, user: {tokenFile: token}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    configuration = api_client(kubeconfig=path).configuration
    assert configuration.api_key == {"BearerToken": "Bearer from-a-token-file"}
    assert Path(configuration.ssl_ca_cert).read_bytes() == ca.cert_pem
    (tmp_path / "token").unlink()
    os.mkfifo(tmp_path / "token")
    with pytest.raises(KubeConnectionError) as error:
        api_client(kubeconfig=path)
    assert str(error.value).startswith(f"--kubeconfig {path}: tokenFile {tmp_path / 'token'}: not a regular file")
