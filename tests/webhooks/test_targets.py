"""No server-side request forgery: an endpoint whose host resolves to a private, link-local or
(outside development) loopback address is refused when added and never dialled."""

from __future__ import annotations

import pytest

from config.errors import DomainError
from tests.webhooks.conftest import Receiver
from webhooks import services, targets
from webhooks.models import Delivery, Endpoint, EventType

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", [
    "http://10.0.0.5/hook",
    "http://192.168.1.20:8080/hook",
    "http://172.16.3.4/hook",
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://100.64.0.1/hook",  # carrier-grade NAT
    "http://[fd00::1]/hook",
    "http://[::ffff:10.0.0.1]/hook",
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
])
def test_private_and_reserved_addresses_are_refused_even_in_development(workspace, url):
    with pytest.raises(DomainError) as refused:
        services.create_endpoint(workspace=workspace, url=url, events=[EventType.CLUSTER_READY])
    assert refused.value.field == "url" and refused.value.code == "webhook_url_refused"
    assert not Endpoint.objects.exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://localhost:9/hook"])
def test_loopback_is_refused_unless_the_setting_allows_it(workspace, settings, url):
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    with pytest.raises(DomainError, match="loopback"):
        services.create_endpoint(workspace=workspace, url=url, events=[EventType.CLUSTER_READY])


def test_a_host_is_refused_when_any_of_its_addresses_is_private(monkeypatch, workspace):
    import ipaddress

    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("93.184.215.14"),
                                                               ipaddress.ip_address("10.1.2.3")])
    with pytest.raises(DomainError, match="10.1.2.3"):
        services.create_endpoint(workspace=workspace, url="https://hooks.example.com/x", events=[EventType.CLUSTER_READY])


@pytest.mark.parametrize(("code", "said"), [
    ("EAI_NONAME", "The host hooks.example.com does not resolve."),
    ("EAI_AGAIN", "The host hooks.example.com could not be looked up just now; try again in a moment."),
])
def test_a_host_that_does_not_resolve_is_refused_in_the_customers_words(monkeypatch, workspace, code, said):
    import socket

    def getaddrinfo(*args, **kwargs):
        raise socket.gaierror(getattr(socket, code), "resolver's own words")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(DomainError) as refused:
        services.create_endpoint(workspace=workspace, url="https://hooks.example.com/rc", events=[EventType.CLUSTER_READY])
    assert refused.value.message == said and refused.value.field == "url"


def test_plain_http_user_info_and_other_schemes_are_refused_where_https_is_required(workspace, settings):
    settings.WEBHOOK_REQUIRE_HTTPS = True
    for url in ("http://hooks.example.com/x", "ftp://hooks.example.com/x", "file:///etc/passwd",
                "https://user:secret@hooks.example.com/x", "https:///nohost"):
        with pytest.raises(DomainError):
            services.create_endpoint(workspace=workspace, url=url, events=[EventType.CLUSTER_READY])


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_whose_host_turns_private_is_never_dialled(receiver: Receiver, workspace, settings):
    endpoint = services.create_endpoint(workspace=workspace, url=receiver.url, events=[EventType.CLUSTER_READY])
    settings.WEBHOOK_ALLOW_LOOPBACK = False  # as if its name now resolved to the control plane's own host
    services.send_test_event(endpoint)
    assert receiver.requests == []
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.PENDING and "loopback" in delivery.last_error
    assert delivery.last_status_code is None


def test_unknown_and_missing_events_are_refused(workspace):
    with pytest.raises(DomainError) as refused:
        services.create_endpoint(workspace=workspace, url="http://127.0.0.1:9/x", events=["cluster.exploded"])
    assert refused.value.field == "events"
    with pytest.raises(DomainError):
        services.create_endpoint(workspace=workspace, url="http://127.0.0.1:9/x", events=[])
    with pytest.raises(DomainError):  # nobody subscribes to test events: they go where asked
        services.create_endpoint(workspace=workspace, url="http://127.0.0.1:9/x", events=[EventType.WEBHOOK_TEST])


# (address, refused in production, refused where loopback is allowed: `make run` and the tests)
ADDRESSES = [
    ("93.184.215.14", False, False),
    ("2606:4700::1111", False, False),
    ("::ffff:93.184.215.14", False, False),
    ("64:ff9b::5db8:d70e", False, False),  # NAT64 of a public address: a gateway forwards it there
    ("2002:5db8:d70e::1", False, False),  # 6to4 of a public address
    ("127.0.0.1", True, False),
    ("::1", True, False),
    ("::ffff:127.0.0.1", True, False),  # the kernel dials 127.0.0.1 itself
    ("::127.0.0.1", True, True),  # deprecated "IPv4-compatible"
    ("64:ff9b::7f00:1", True, True),  # NAT64 of 127.0.0.1
    ("64:ff9b:1::7f00:1", True, True),  # local-use NAT64
    ("2002:7f00:1::", True, True),  # 6to4 of 127.0.0.1
    ("2002:a00:1::", True, True),  # 6to4 of 10.0.0.1
    ("::ffff:0:7f00:1", True, True),  # "IPv4-translated" 127.0.0.1
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", True, True),  # Teredo, whose client is 127.0.0.1
    ("fec0::1", True, True),  # site-local
    ("3fff::1", True, True),  # documentation
    ("2001:db8::1", True, True),
    ("5f00::1", True, True),  # SRv6
    ("fe80::1", True, True),
    ("fd00::1", True, True),
    ("::", True, True),
    ("ff02::1", True, True),
    ("100::1", True, True),  # discard-only
]


@pytest.mark.parametrize(("address", "in_production", "in_development"), ADDRESSES)
def test_only_global_unicast_addresses_are_dialled_however_an_ipv4_address_is_spelt(
    settings, address, in_production, in_development
):
    import ipaddress

    settings.WEBHOOK_ALLOW_LOOPBACK = False
    assert (targets.address_problem(ipaddress.ip_address(address)) is not None) is in_production
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    assert (targets.address_problem(ipaddress.ip_address(address)) is not None) is in_development


@pytest.mark.parametrize("address", ["::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:0:7f00:1",
                                     "fec0::1", "3fff::1", "5f00::1"])
def test_an_endpoint_at_an_ipv6_form_of_a_refused_address_is_refused_when_added(workspace, settings, address):
    settings.WEBHOOK_ALLOW_LOOPBACK = False
    with pytest.raises(DomainError) as refused:
        services.create_endpoint(workspace=workspace, url=f"http://[{address}]:8080/hook", events=[EventType.CLUSTER_READY])
    assert refused.value.field == "url" and "public addresses only" in refused.value.message
