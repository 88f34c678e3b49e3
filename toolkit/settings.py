"""Settings from flags and environment, for both services: one model per service, one way to read it.

Each field of a service's pydantic model is a flag (`foo_bar` is `--foo-bar`) and an environment variable
(`<PREFIX>FOO_BAR`). Flags win over variables, which win over defaults. `--help` is generated from the fields
(description, default, and the `metavar`/`accepts` hints given with `setting()`), so a new setting is one new field.

Every problem a user can fix is one `SettingsError` line in one style, `--flag: what is wrong (accepts ...), got 'x'`,
which the CLIs print as `<prog>: error: <line>` and turn into exit code 2.
"""

from __future__ import annotations

import argparse
import enum
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

M = TypeVar("M", bound=BaseModel)


class SettingsError(ValueError):
    """A start-up problem the user can fix, as the one line they see (exit code 2)."""


def package_version() -> str:
    try:
        return metadata.version("gpu-pulse")
    except metadata.PackageNotFoundError:
        return "0+unknown"


# ---- listen addresses ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str  # "0.0.0.0", "::", "127.0.0.1", "localhost", ...
    port: int  # 0: an ephemeral port

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


LISTEN_ACCEPTS = "host:port, [ipv6]:port or :port, with a port from 0 to 65535"


def parse_listen(text: object) -> ListenAddress:
    """`host:port`, `[v6]:port` or `:port` (all interfaces). Raises ValueError saying what is accepted."""
    if isinstance(text, ListenAddress):
        return text
    accepted = f"expected {LISTEN_ACCEPTS}"
    if not isinstance(text, str):
        raise ValueError(accepted)
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(accepted)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address; {accepted}") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(accepted)
        if ":" in host:
            raise ValueError(f"put an IPv6 address in brackets, e.g. [::]:9400; {accepted}")
        if host and not all(part and len(part) <= 63 for part in host.split(".")):
            raise ValueError(f"{host!r} is not a host name or address; {accepted}")
        if any(c.isspace() or c in "/@?#[]" for c in host):
            raise ValueError(f"{host!r} is not a host name or address; {accepted}")
        host = host or "0.0.0.0"
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(accepted)
    return ListenAddress(host, int(port))


# ---- fields ----------------------------------------------------------------------------------------------------------
def setting(default: Any, description: str, *, metavar: str, accepts: str = "", **constraints: Any) -> Any:
    """A model field with what `--help` and the error lines need: `metavar` names the value, `accepts` says which
    values are good (shown when a value is refused)."""
    return Field(
        default, description=description, json_schema_extra={"metavar": metavar, "accepts": accepts}, **constraints
    )


def lower(value: object) -> object:
    """A BeforeValidator: case-insensitive choices."""
    return value.lower() if isinstance(value, str) else value


def comma_list(value: object) -> object:
    """A BeforeValidator: `a, b,c` -> ("a", "b", "c")."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class ConnectionSettings(BaseSettings):
    """The connection limits both servers take, as the same three flags in both commands; the servers turn them into
    toolkit.connections' `ConnectionLimits` (this model knows nothing of the servers' runtime)."""

    max_connections: int = setting(
        512,
        "Most connections served at once. At the cap, the connection that has waited longest for a request makes "
        "room for a new one; when all are busy, a new one gets 503. The open-file limit is raised to fit.",
        metavar="N",
        accepts="a whole number from 1 to 1000000",
        ge=1,
        le=1_000_000,
    )
    header_read_timeout: float = setting(
        10.0,
        "Seconds a client has to finish the TLS handshake (where served) and send a whole request head, from "
        "connecting or from its first byte.",
        metavar="SECONDS",
        accepts="a number of seconds > 0 and <= 3600",
        gt=0,
        le=3600,
        allow_inf_nan=False,
    )
    idle_timeout: float = setting(
        60.0,
        "Seconds a kept-alive connection may wait for its next request before it is closed.",
        metavar="SECONDS",
        accepts="a number of seconds > 0 and <= 86400",
        gt=0,
        le=86_400,
        allow_inf_nan=False,
    )


def check_tls_pair(cert_file: object, key_file: object) -> None:
    """For a model validator: the serving certificate and its key are given together or not at all."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file go together: give both or neither")


def choices_of(info: FieldInfo) -> tuple[str, ...]:
    """The values a Literal or Enum setting takes, as spelled on the command line; () for any other setting."""
    annotation = info.annotation
    if get_origin(annotation) is Literal:
        return tuple(str(value) for value in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(str(member.value) for member in annotation)
    return ()


def _hint(info: FieldInfo, key: str) -> str:
    extra = info.json_schema_extra
    value = extra.get(key) if isinstance(extra, dict) else None
    return str(value) if value else ""


# ---- the command line ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommandLine:
    """How one service's model meets the command line and the environment."""

    model: type[BaseModel]
    prog: str
    description: str
    env_prefix: str
    # old spellings kept working, hidden from --help: flag (without "--") -> field
    aliases: Mapping[str, str] = field(default_factory=dict)
    # variables with these prefixes belong to someone else (the exporter's GPU_PULSE_ is a prefix of the adapter's)
    foreign_env_prefixes: tuple[str, ...] = ()

    def flag(self, name: str) -> str:
        return "--" + name.replace("_", "-")

    def env(self, name: str) -> str:
        return self.env_prefix + name.upper().replace("-", "_")

    def parser(self) -> argparse.ArgumentParser:
        """The `--help`-bearing parser, generated from the model's fields: the service's own settings first, in the
        order its model declares them (the main ones lead), then the connection limits both services share. A setting
        with a fixed set of values shows them as `{a,b}` in both commands alike."""
        parser = _Parser(prog=self.prog, description=self.description, argument_default=argparse.SUPPRESS)
        parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
        limits = parser.add_argument_group("connection limits (both services)")
        shared = ConnectionSettings.model_fields
        fields = self.model.model_fields
        for name in sorted(fields, key=lambda name: name in shared):  # stable: each part keeps its order
            info = fields[name]
            help_ = f"{info.description} [env {self.env(name)}{_shown_default(info.default)}]".replace("%", "%%")
            self._add(limits if name in shared else parser, self.flag(name), name, info, help_)
        for alias, name in self.aliases.items():
            self._add(parser, "--" + alias, name, fields[name], argparse.SUPPRESS)
        return parser

    @staticmethod
    def _add(parser: argparse._ActionsContainer, flag: str, name: str, info: FieldInfo, help_: str) -> None:
        if info.annotation is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, help=help_)
        else:
            choices = choices_of(info)
            metavar = "{" + ",".join(choices) + "}" if choices else _hint(info, "metavar") or None
            parser.add_argument(flag, dest=name, metavar=metavar, help=help_)

    def load(
        self,
        argv: Sequence[str],
        environ: Mapping[str, str],
        *,
        complete: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> BaseModel:
        """Settings from flags (`argv`, without the program name), then variables, then defaults.

        `complete` may fill values that depend on the others or on the environment before validation. Raises
        SettingsError (one line) on any bad value or unknown variable; `--help`/`--version` print and raise
        SystemExit(0) as argparse does.
        """
        from_cli = vars(self.parser().parse_args(list(argv)))
        from_env = self._from_env(environ)
        values = {**from_env, **from_cli}
        if complete is not None:
            values = complete(values)
        try:
            return self.model.model_validate(values)
        except ValidationError as error:
            raise SettingsError(self._explain(error, from_cli)) from None

    def _from_env(self, environ: Mapping[str, str]) -> dict[str, Any]:
        fields = self.model.model_fields
        names = {self.env(name): name for name in fields}
        names.update({self.env(alias): name for alias, name in self.aliases.items()})
        values: dict[str, Any] = {}
        for variable, value in environ.items():
            if not variable.startswith(self.env_prefix) or variable.startswith(self.foreign_env_prefixes):
                continue
            name = names.get(variable)
            if name is None:
                raise SettingsError(f"{variable}: not a setting of {self.prog} (see --help)")
            if value != "":
                values[name] = value
        return values

    def _explain(self, error: ValidationError, from_cli: Mapping[str, Any]) -> str:
        problems = []
        for item in error.errors():
            loc = item.get("loc") or ()
            message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
            if not loc or loc[0] not in self.model.model_fields:
                problems.append(message)
                continue
            name = str(loc[0])
            where = self.flag(name) if name in from_cli else self.env(name)
            accepts = _hint(self.model.model_fields[name], "accepts")
            enumerated = message.startswith("Input should be '")  # pydantic already lists the choices
            said = accepts in message  # the parser's own line already says what is accepted: not twice
            hint = f" (accepts {accepts})" if accepts and not enumerated and not said else ""
            problems.append(f"{where}: {message}{hint}, got {_shown_input(item.get('input'))}")
        return "; ".join(problems)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own errors: one line, not usage + line
        raise SettingsError(f"{message} (see --help)")


def _shown_default(default: object) -> str:
    if default is None:
        return ""
    if isinstance(default, tuple):
        return f"; default: {','.join(str(d) for d in default)}"
    return f"; default: {getattr(default, 'value', default)}"


def _shown_input(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
