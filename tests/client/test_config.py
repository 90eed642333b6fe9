from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from runcrate_client import Client
from runcrate_client.api import DEFAULT_API_URL, ClientConfig, ConfigError, write_config_value


def test_it_defaults_to_the_local_server_without_a_key(config_file: Path) -> None:
    config = ClientConfig.resolve()
    assert config.api_url == DEFAULT_API_URL
    assert config.api_key is None
    assert config.environment is None


def test_explicit_arguments_beat_environment_variables_which_beat_the_file(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text(yaml.safe_dump(
        {"api_key": "rc_live_file", "api_url": "http://file:1", "environment": "file-env"}
    ))
    assert ClientConfig.resolve().api_key == "rc_live_file"

    monkeypatch.setenv("RUNCRATE_API_KEY", "rc_live_env")
    monkeypatch.setenv("RUNCRATE_ENVIRONMENT", "env-env")
    config = ClientConfig.resolve()
    assert (config.api_key, config.api_url, config.environment) == ("rc_live_env", "http://file:1", "env-env")
    assert config.sources == {"api_key": "RUNCRATE_API_KEY", "api_url": str(config_file),
                              "environment": "RUNCRATE_ENVIRONMENT", "workspace": "default"}

    config = ClientConfig.resolve(api_key="rc_live_arg", api_url="http://arg:2/", environment="arg-env")
    assert (config.api_key, config.api_url, config.environment) == ("rc_live_arg", "http://arg:2", "arg-env")


def test_config_set_writes_a_private_file(config_file: Path) -> None:
    write_config_value("api_key", "rc_live_secret")
    write_config_value("api-url", "http://example.test")
    assert yaml.safe_load(config_file.read_text()) == {"api_key": "rc_live_secret", "api_url": "http://example.test"}
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    write_config_value("api_url", None)
    assert yaml.safe_load(config_file.read_text()) == {"api_key": "rc_live_secret"}


def test_it_refuses_unknown_settings(config_file: Path) -> None:
    with pytest.raises(ConfigError, match="unknown setting"):
        write_config_value("colour", "blue")


def test_a_broken_config_file_is_a_clear_error(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        ClientConfig.resolve()


def test_the_client_needs_a_key(config_file: Path) -> None:
    with pytest.raises(ConfigError, match="RUNCRATE_API_KEY"):
        Client("http://127.0.0.1:8000")


def test_cli_config_set_and_show(config_file: Path) -> None:
    from click.testing import CliRunner

    from runcrate_client.cli import main

    def cli(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    result = cli("config", "set", "api_key", "rc_live_abcdefghijklmnopqrstuvwxyz")
    assert result.exit_code == 0, result.stderr
    assert "rc_live_abcd…wxyz" in result.stdout  # never echoed in full
    result = cli("config", "show")
    assert "rc_live_abcd…wxyz" in result.stdout
    assert "config.yaml" in result.stdout
