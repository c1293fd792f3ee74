"""Numbers in text are ASCII digits: '¹' (int() refuses it) and '٣' (int() reads 3) are not numbers,
wherever mur reads one. The helper, then the places a user, a peer or a target hands mur such text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mur.digits import digits_int, is_digits
from mur.errors import MurError

NOT_ASCII = ["¹", "²00", "①", "٣", "३", "1٣", "８０"]  # superscripts, circled, Arabic-Indic, Devanagari, fullwidth


@pytest.mark.parametrize("text", NOT_ASCII + ["", "-1", "1.0", " 1", "0x1"])
def test_only_ascii_digits_are_digits(text):
    assert not is_digits(text) and digits_int(text) is None


def test_ascii_digits_are():
    assert is_digits("0") and digits_int("0080") == 80


@pytest.mark.parametrize("text", NOT_ASCII)
def test_a_network_entry_with_such_a_port_is_e_cap_001(text):
    from mur.manifest.network import parse_allow_entry

    with pytest.raises(MurError) as err:
        parse_allow_entry(f"api.example.com:{text}")
    assert err.value.code == "E-CAP-001"


@pytest.mark.parametrize("text", NOT_ASCII)
def test_options_and_addresses_refuse_them_with_an_error_not_a_traceback(text):
    from mur.artifacts.registry_server import parse_bind
    from mur.fleet.plan import parse_batch

    with pytest.raises(MurError):
        parse_batch(text)
    with pytest.raises(MurError):
        parse_bind(f"127.0.0.1:{text}")


def test_peer_and_target_text_is_not_read_as_a_number():
    from mur.front import http
    from mur.front.http import BadMessage
    from mur.artifacts.operations import version_key
    from mur.image.spec import source_date_epoch

    with pytest.raises(BadMessage):
        http.status_of(http.Head("HTTP/1.1 ²00 OK", []))
    assert source_date_epoch({"SOURCE_DATE_EPOCH": "¹"}) == 0
    assert version_key("1.¹") != version_key("1.1")


@pytest.mark.parametrize("address", ["@¹", "@٣"])
def test_a_trace_ordinal_in_other_digits_is_e_trc_002(tmp_path, address):
    res = subprocess.run([sys.executable, "-m", "mur", "trace", "show", address, "--workdir", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "error[E-TRC-002]" in res.stderr or "error[E-IO-001]" in res.stderr, res.stderr
