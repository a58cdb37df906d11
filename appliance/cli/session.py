"""The login kept between runs: one JSON file, readable by its owner only.

Besides the tokens it keeps how the https endpoint is trusted (`tls`: the pinned certificate
fingerprint, a CA file, or --insecure; appliance/cli/trust.py), as ssh's known_hosts keeps
a host key: every later command checks the server against it.

Where: $APPLIANCE_CLI_CONFIG_DIR, else $XDG_CONFIG_HOME/appliance, else ~/.config/appliance.
The file holds bearer and refresh tokens, so it is written 0600 inside a 0700 directory and
replaced atomically: a crash mid-write leaves the old session, never half a file.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping

from appliance.cli import NotLoggedIn
from appliance.cli.trust import Trust

SESSION_FILE_NAME = "session.json"

# Treat a token as expired a little early so it does not lapse between our check and the
# server's; clocks of client and server also drift.
EXPIRY_MARGIN_SECONDS = 30.0


def config_dir_from_environ(environ: Mapping[str, str], home: Path) -> Path:
    if environ.get("APPLIANCE_CLI_CONFIG_DIR"):
        return Path(environ["APPLIANCE_CLI_CONFIG_DIR"])
    if environ.get("XDG_CONFIG_HOME"):
        return Path(environ["XDG_CONFIG_HOME"]) / "appliance"
    return home / ".config" / "appliance"


def to_rfc3339(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def from_rfc3339(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclasses.dataclass
class Session:
    endpoint: str
    username: str
    scope: str
    access_token: str
    refresh_token: str | None
    expires_at: float  # epoch seconds, as measured by our clock
    refresh_expires_at: float | None = None
    # what the https endpoint's certificate must be (appliance.cli.trust); None for http
    # and for sessions saved before it was kept
    trust: Trust | None = None

    def access_expired(self, now: float) -> bool:
        return now >= self.expires_at - EXPIRY_MARGIN_SECONDS

    def can_refresh(self, now: float) -> bool:
        if not self.refresh_token:
            return False
        return self.refresh_expires_at is None or now < self.refresh_expires_at

    def with_tokens(self, token_response: Mapping, now: float) -> "Session":
        """The session after a token grant; keeps the old refresh token when none is rotated in."""
        return dataclasses.replace(
            self,
            access_token=token_response["access_token"],
            refresh_token=token_response.get("refresh_token") or self.refresh_token,
            expires_at=_expiry(token_response, "expires_in", "expires_at", now) or now,
            refresh_expires_at=_expiry(token_response, "refresh_expires_in", None, now),
        )

    def to_json(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "username": self.username,
            "scope": self.scope,
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "expires_at": to_rfc3339(self.expires_at),
            "refresh_expires_at": (
                to_rfc3339(self.refresh_expires_at) if self.refresh_expires_at is not None else None
            ),
            "tls": self.trust.to_json() if self.trust is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> "Session":
        refresh_expires_at = data.get("refresh_expires_at")
        return cls(
            endpoint=data["endpoint"],
            username=data.get("username") or "",
            scope=data.get("scope") or "",
            access_token=data["access_token"],
            refresh_token=data.get("refresh_token"),
            expires_at=from_rfc3339(data["expires_at"]),
            refresh_expires_at=from_rfc3339(refresh_expires_at) if refresh_expires_at else None,
            trust=Trust.from_json(data["tls"]) if data.get("tls") is not None else None,
        )


def new_session(endpoint: str, username: str, scope: str, token_response: Mapping, now: float,
                trust: Trust | None = None) -> Session:
    empty = Session(endpoint, username, scope, access_token="", refresh_token=None, expires_at=now,
                    trust=trust)
    return empty.with_tokens(token_response, now)


def _expiry(response: Mapping, relative_key: str, absolute_key: str | None, now: float) -> float | None:
    # Prefer the relative lifetime: measured against our own clock it survives clock skew.
    relative = response.get(relative_key)
    if isinstance(relative, (int, float)) and not isinstance(relative, bool):
        return now + float(relative)
    absolute = response.get(absolute_key) if absolute_key else None
    if isinstance(absolute, (int, float)) and not isinstance(absolute, bool):
        return float(absolute)
    if isinstance(absolute, str):
        try:
            return from_rfc3339(absolute)
        except ValueError:
            return None
    return None


class SessionStore:
    def __init__(self, config_dir: Path):
        self.config_dir = Path(config_dir)
        self.path = self.config_dir / SESSION_FILE_NAME

    def load(self) -> Session | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise NotLoggedIn(f"cannot read session file {self.path}: {exc.strerror}") from None
        try:
            return Session.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError):
            raise NotLoggedIn(
                f"session file {self.path} is damaged; run `appliance login` again"
            ) from None

    def save(self, session: Session) -> None:
        self.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=self.config_dir, prefix=".session-", suffix=".tmp")
        try:
            # mkstemp already creates 0600; the chmod states the contract whatever the platform.
            os.fchmod(descriptor, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(session.to_json(), handle, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def delete(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
