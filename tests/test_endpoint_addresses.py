"""Endpoint hosts are read the way the HTTP client reads them: every spelling of a refused address is refused.

The spellings are generated (Hypothesis, derandomized) from an address, and the C library's own
``inet_aton`` (what ``getaddrinfo`` and so the HTTP client use) confirms each spelling means that
address, so the expectation does not come from the code under test.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.calls.endpoints import check_endpoint
from fieldeval.errors import UsageError

REFUSED_V4 = [ipaddress.ip_network(n) for n in ("169.254.0.0/16", "224.0.0.0/4", "0.0.0.0/8")]
ALLOWED_V4 = [ipaddress.ip_network(n) for n in ("127.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12")]


def _in(networks):
    return st.sampled_from(networks).flatmap(
        lambda net: st.integers(int(net.network_address), int(net.broadcast_address)).map(ipaddress.IPv4Address))


@st.composite
def spelling(draw, address: ipaddress.IPv4Address) -> str:
    """One of the forms inet_aton accepts for ``address``: 1 to 4 parts, each decimal, octal or hex."""
    value = int(address)
    parts = draw(st.integers(1, 4))
    octets = list(address.packed)
    numbers = {1: [value], 2: [octets[0], value & 0xFFFFFF], 3: [octets[0], octets[1], value & 0xFFFF],
               4: octets}[parts]

    def render(number: int) -> str:
        form = draw(st.sampled_from(["dec", "oct", "hex", "HEX"]))
        if form == "oct" and number:
            return "0" + format(number, "o")
        if form in ("hex", "HEX"):
            text = "0x" + format(number, "x")
            return text.upper().replace("0X", "0x") if form == "HEX" else text
        return str(number)

    text = ".".join(render(n) for n in numbers)
    return text + "." if draw(st.booleans()) else text


def _url_host(text: str) -> str:
    return f"http://{text}:8000/v1"


def _means(text: str, address: ipaddress.IPv4Address) -> bool:
    """Whether the C library reads ``text`` (trailing dot aside) as ``address``."""
    return socket.inet_aton(text.rstrip(".")) == address.packed


@settings(max_examples=300, deadline=None)
@given(st.data(), _in(REFUSED_V4))
def test_every_ipv4_spelling_of_a_refused_address_is_refused(data, address):
    text = data.draw(spelling(address))
    assert _means(text, address)
    with pytest.raises(UsageError, match="refused"):
        check_endpoint(_url_host(text))


@settings(max_examples=200, deadline=None)
@given(st.data(), _in(ALLOWED_V4))
def test_loopback_and_private_addresses_stay_allowed_in_any_spelling(data, address):
    text = data.draw(spelling(address))
    assert _means(text, address)
    assert check_endpoint(_url_host(text)) == _url_host(text)


@settings(max_examples=200, deadline=None)
@given(_in(REFUSED_V4), st.sampled_from(["mapped", "mapped-hex", "expanded", "nat64"]))
def test_ipv6_forms_carrying_a_refused_ipv4_address_are_refused(address, form):
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    text = {"mapped": f"::ffff:{address}", "mapped-hex": mapped.compressed, "expanded": mapped.exploded,
            "nat64": str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(address)))}[form]
    with pytest.raises(UsageError, match="refused"):
        check_endpoint(f"http://[{text}]:8000/v1")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["fe80::/10", "ff00::/8"]).flatmap(
    lambda n: st.integers(int(ipaddress.ip_network(n).network_address),
                          int(ipaddress.ip_network(n).broadcast_address))).map(ipaddress.IPv6Address),
       st.sampled_from(["compressed", "exploded", "upper", "scoped"]))
def test_ipv6_link_local_and_multicast_are_refused_in_any_form(address, form):
    text = {"compressed": address.compressed, "exploded": address.exploded, "upper": address.exploded.upper(),
            "scoped": address.compressed + "%25lo"}[form]
    with pytest.raises(UsageError, match="refused"):
        check_endpoint(f"http://[{text}]/v1")


@pytest.mark.parametrize("host", ["0xA9FEA9FE", "2852039166", "0251.0376.0251.0376", "169.254.43518",
                                  "169.254.169.254.", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "0",
                                  "0.0.0.0", "[::]", "224.0.0.251", "[ff02::1]"])
def test_the_trial_spellings_are_refused_with_one_line(host):
    with pytest.raises(UsageError) as error:
        check_endpoint(f"http://{host}/v1")
    assert "\n" not in str(error.value) and "refused" in str(error.value)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "10.0.0.5", "192.168.1.20", "127.1"])
def test_local_model_servers_stay_allowed(host):
    assert check_endpoint(f"http://{host}:11434/v1") == f"http://{host}:11434/v1"
