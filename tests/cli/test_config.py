"""Where ``cronicorn`` finds its server and key (cli/config.py): the environment, a profile
of the config file, ``--profile`` and ``--url``; each mistake said in words. And a
redirect, which the client refuses rather than send the key on."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from cli.client import Client, Refused
from cli.config import ConfigProblem, config_path, load_settings

CONFIG = """
[profiles.default]
url = "https://cron.example.com"
api_key = "cc_default"

[profiles.staging]
url = "https://staging.example.com"
api_key_env = "STAGING_KEY"
timeout = 5
"""


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    path.chmod(0o600)
    return {"CRONICORN_CONFIG": str(path)}


def test_the_environment_wins_over_the_default_profile(environ: dict[str, str]) -> None:
    assert load_settings(environ).url == "https://cron.example.com"
    assert load_settings(environ).key == "cc_default"
    mine = {**environ, "CRONICORN_URL": "http://127.0.0.1:8000", "CRONICORN_API_KEY": "cc_env"}
    settings = load_settings(mine)
    assert (settings.url, settings.key, settings.timeout) == ("http://127.0.0.1:8000", "cc_env", 60)


def test_a_named_profile_is_used_whole_and_may_read_its_key_from_a_variable(
    environ: dict[str, str],
) -> None:
    mine = {**environ, "CRONICORN_API_KEY": "cc_env", "STAGING_KEY": "cc_staging"}
    settings = load_settings(mine, profile="staging")
    assert (settings.url, settings.key, settings.timeout) == (
        "https://staging.example.com",
        "cc_staging",
        5,
    )
    assert load_settings({**mine, "CRONICORN_PROFILE": "staging"}).key == "cc_staging"
    assert load_settings(mine, profile="staging", url="http://x:1").url == "http://x:1"
    with pytest.raises(ConfigProblem, match=r"reads its key from \$STAGING_KEY, which is not set"):
        load_settings(environ, profile="staging")


def test_mistakes_are_named(environ: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(
        ConfigProblem, match=r"No profile 'prod' in .* \(profiles there: default, staging\)"
    ):
        load_settings(environ, profile="prod")
    with pytest.raises(ConfigProblem, match="must start with http:// or https://"):
        load_settings(environ, url="cron.example.com")
    broken = tmp_path / "broken.toml"
    broken.write_text("[profiles.default\nurl=")
    with pytest.raises(ConfigProblem, match="is not valid TOML"):
        load_settings({"CRONICORN_CONFIG": str(broken)})
    with pytest.raises(ConfigProblem, match="No server URL"):
        load_settings({"CRONICORN_CONFIG": str(tmp_path / "none.toml")})


def test_a_config_file_others_can_read_is_warned_about(environ: dict[str, str]) -> None:
    assert load_settings(environ).warnings == ()
    Path(environ["CRONICORN_CONFIG"]).chmod(0o644)
    (warning,) = load_settings(environ).warnings
    assert "others may read it; chmod 600" in warning


def test_the_file_is_found_where_xdg_says() -> None:
    assert config_path({"HOME": "/home/op"}) == Path("/home/op/.config/cronicorn/config.toml")
    assert config_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/cronicorn/config.toml")


def test_a_redirect_is_refused_and_the_key_never_follows_it() -> None:
    """urllib would send the Authorization header on to the redirect's host."""
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/other")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_port}", "cc_secret")
        with pytest.raises(Refused) as refused:
            client.call("list_endpoints")
    finally:
        server.shutdown()
        server.server_close()
    assert refused.value.status == 302
    assert "The server redirects to http://127.0.0.1:" in refused.value.problem["detail"]
    assert seen == ["Bearer cc_secret"]  # one request: the redirect was not followed
