"""The HTML lists read their query string as strictly as the API: an unknown parameter (``?serial=`` on a page
that has no such filter) or a value outside a filter's choices answers 400 naming it, never the unfiltered list
that a script or an operator would take for the answer."""

import pytest
from django.urls import reverse

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

# (url name, a valid query, a query with a bad value of a known filter)
PAGES = [
    ("firmware-release-list", "component=bmc&channel=stable", "channel=nightly"),
    ("firmware-bundle-list", "", None),
    ("firmware-baseline-list", "", None),
    ("firmware-pool-list", "", None),
    ("firmware-window-list", "", None),
    ("firmware-drift", "site=SJC1&platform=3&component=bmc&status=drift&server=7", "platform=three"),
    ("rollout-list", "state=running", "state=runing"),
    ("procurement-home", "status=draft", "status=shipped-ish"),
    ("procurement-rma-list", "status=all", "status=lost"),
    ("decommission:request-list", "state=certified", "state=wiped"),
]


@pytest.mark.parametrize(("name", "good", "bad"), PAGES)
def test_unknown_parameter_is_400_naming_it(client, users, name, good, bad):
    client.force_login(users["viewer"])
    url = reverse(name)
    assert client.get(f"{url}?{good}").status_code == 200
    response = client.get(f"{url}?{good}&serial=1650123456789" if good else f"{url}?serial=1650123456789")
    assert response.status_code == 400
    body = response.content.decode()
    assert "<code>serial</code>: Unknown query parameter" in body
    assert f'href="{url}"' in body  # the way back to the whole list
    if bad:
        name_, value = bad.split("=")
        response = client.get(f"{url}?{bad}")
        assert response.status_code == 400
        assert f"<code>{name_}</code>: &#x27;{value}&#x27; is not a valid {name_}" in response.content.decode()


def test_pager_and_empty_filters_stay_accepted(client, users):
    client.force_login(users["viewer"])
    assert client.get(reverse("rollout-list") + "?state=&after=12").status_code == 200
    assert client.get(reverse("firmware-release-list") + "?component=&channel=").status_code == 200


def test_anonymous_is_sent_to_login_before_the_query_is_read(client):
    response = client.get(reverse("rollout-list") + "?serial=1")
    assert response.status_code == 302 and "/login/" in response["Location"]
