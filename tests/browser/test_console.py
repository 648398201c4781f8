"""The operator console in a real headless Chromium against the example snapshot: every view loads
without console errors and shows the numbers the JSON endpoints give; filters, the explain form and
bad input work as an operator would use them."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

try:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the dev extra brings it; without it, as without Chromium (conftest.py)
    if os.environ.get("BROWSER_TESTS_REQUIRED"):
        raise
    pytest.skip("selenium is not installed: pip install -e '.[dev]'", allow_module_level=True)

from tests.browser.harness import ADMITTED, ASSUMED, EXAMPLES, PLANNED, SHORT, TOO_BIG, WAITING, Extender

GPU = "nvidia.com/gpu"
TIMEOUT = 15


class Console:
    """The browser on the console of one extender."""

    def __init__(self, driver: WebDriver, extender: Extender) -> None:
        self.driver = driver
        self.extender = extender

    def open(self, path: str) -> None:
        self.driver.get(self.extender.url + path)
        self.loaded()

    def loaded(self) -> None:
        complete = "return document.readyState === 'complete'"
        WebDriverWait(self.driver, TIMEOUT).until(lambda d: d.execute_script(complete))
        WebDriverWait(self.driver, TIMEOUT).until(ec.presence_of_element_located((By.TAG_NAME, "main")))

    def severe(self) -> list[dict[str, Any]]:
        """SEVERE entries of the browser console since the last call (reading the log empties it)."""
        return [entry for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text.strip()

    def submit_and_wait(self, element: WebElement, url_part: str) -> None:
        """Submit (or change) something that loads a new page, and wait for that page."""
        WebDriverWait(self.driver, TIMEOUT).until(lambda _: _detached(element))
        WebDriverWait(self.driver, TIMEOUT).until(ec.url_contains(url_part))
        self.loaded()


def _detached(element: WebElement) -> bool:
    """``ec.staleness_of``, also for Chrome's other word for it: an element of a page that has been
    replaced can raise "does not belong to the document" instead of a stale-reference error."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


@pytest.fixture(scope="module")
def ui(browser: WebDriver, extender: Extender) -> Console:
    return Console(browser, extender)


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", "Cluster"),
        ("/ui/cluster", "Cluster"),
        ("/ui/queues", "Queues"),
        ("/ui/groups", "Groups"),
        ("/ui/decisions", "Decisions"),
        ("/ui/explain", "Explain"),
        ("/ui/health", "Health"),
    ],
)
def test_each_view_loads_without_console_errors(ui: Console, path: str, heading: str) -> None:
    ui.open(path)
    assert ui.text("h1").startswith(heading)
    assert ui.text("nav a.active") == heading
    assert ui.driver.execute_script("return getComputedStyle(document.body).margin") == "0px"  # the CSS loaded
    assert ui.severe() == []


def test_cluster_shows_the_numbers_of_debug(ui: Console) -> None:
    debug = ui.extender.get_json("/debug")
    ui.open("/ui/cluster")
    node = debug["nodes"]["dgx-a100-1"]
    row = ui.find('tr[data-node="dgx-a100-1"]')
    allocated = row.find_elements(By.CSS_SELECTOR, ".cell.allocated")
    assert len(allocated) == node["requested"][GPU] and len(row.find_elements(By.CSS_SELECTOR, ".cell.free")) == 0
    holders = {cell.get_attribute("title").rsplit("pod ", 1)[1] for cell in allocated}
    assert holders == {"ml-train/llama-finetune-0", f"ml-train/{ADMITTED}"}
    # The assumed pod: its node's cells, the ledger's requests.
    ledger = {entry["pod"]: entry for entry in debug["assumeLedger"]}
    assumed = ui.find_all(f'tr[data-node="{ASSUMED[1]}"] .cell.assumed')
    assert len(assumed) == ledger[ASSUMED[0]]["requests"][GPU]
    assert all(ASSUMED[0] in cell.get_attribute("title") for cell in assumed)
    # Totals: device plugin GPUs plus DRA devices, a device of a pool several nodes see counted once.
    devices = {
        (pool["driver"], pool["pool"], device["name"]): device["holder"]
        for entry in debug["nodes"].values()
        for pool in entry.get("dra", {}).get("pools", [])
        for s in pool["slices"]
        for device in s["devices"]
    }
    gpus = sum(entry["allocatable"].get(GPU, 0) for entry in debug["nodes"].values()) + len(devices)
    free = sum(entry["free"][GPU] for entry in debug["nodes"].values()) + sum(not h for h in devices.values())
    assert ui.text("#total-gpus") == str(gpus)
    assert ui.text("#total-free") == str(free)
    assert ui.text("#total-assumed") == str(sum(e["requests"].get(GPU, 0) for e in debug["assumeLedger"]))
    assert ui.text("#total-fragmentation").endswith("%")
    dra = ui.find('tr[data-node="dra-1"] .cell.allocated').get_attribute("title")
    assert "claim ml-train/notebook-0-gpu" in dra


def test_cluster_filters_as_an_operator_uses_them(ui: Console) -> None:
    nodes = sorted(ui.extender.get_json("/debug")["nodes"])
    ui.open("/ui/cluster")
    box = ui.find('input[name="name"]')
    box.send_keys("l4")
    box.submit()
    ui.submit_and_wait(box, "name=l4")
    assert [r.get_attribute("data-node") for r in ui.find_all("tr[data-node]")] == [n for n in nodes if "l4" in n]
    # The model list submits itself on change (the page's script).
    select = ui.find('select[name="model"]')
    Select(select).select_by_value("NVIDIA-A100-SXM4-80GB")
    ui.submit_and_wait(select, "model=NVIDIA-A100")
    shown = [r.get_attribute("data-node") for r in ui.find_all("tr[data-node]")]
    assert shown == []  # name=l4 is kept: no L4-named node is an A100
    ui.open("/ui/cluster?model=NVIDIA-A100-SXM4-80GB&size=1")
    assert [r.get_attribute("data-node") for r in ui.find_all("tr[data-node]")] == ["dgx-a100-1"]
    following = ui.find('a[rel="next"]')
    following.click()
    ui.submit_and_wait(following, "page=2")
    assert [r.get_attribute("data-node") for r in ui.find_all("tr[data-node]")] == ["dgx-a100-2"]
    assert ui.severe() == []


def test_queues_show_the_numbers_of_debug_queues(ui: Console) -> None:
    view = ui.extender.get_json("/debug/queues")
    ui.open("/ui/queues")
    research = {r["flavor"]: r for r in view["nodes"]["cq/research"]["resources"]}
    row = ui.find('tbody[data-queue="cq/research"] tr[data-flavor="a100-reserved"]')
    assert row.find_element(By.CSS_SELECTOR, ".quota").text == f"{research['a100-reserved']['subtreeQuota']:g}"
    assert row.find_element(By.CSS_SELECTOR, ".usage").text == f"{research['a100-reserved']['usage']:g}"
    assert research["a100-reserved"]["usage"] > 0  # the pod admitted in set-up
    head = ui.text('tbody[data-queue="cq/research"] .queue-head')
    assert f"DRS {view['nodes']['cq/research']['weightedShareRounded']}‰" in head
    pending = ui.text(f'tr[data-pod="ml-train/{WAITING}"]')
    assert "research" in pending and "Insufficient nvidia.com/gpu" in pending
    assert ui.severe() == []


def test_groups_show_the_gangs_of_debug(ui: Console) -> None:
    gangs = ui.extender.get_json("/debug?nodes=false&decisions=0")["gangs"]
    ui.open("/ui/groups")
    shown = [g.get_attribute("data-group") for g in ui.find_all("#groups tbody[data-group]")]
    assert shown == [g["group"] for g in gangs["groups"]] and set(shown) == {PLANNED, TOO_BIG, SHORT}
    states = {g.get_attribute("data-group"): g.get_attribute("data-state") for g in ui.find_all("#groups tbody")}
    assert states == {PLANNED: "planned", TOO_BIG: "unschedulable", SHORT: "waiting"}
    for entry in gangs["groups"]:
        group = ui.find(f'#groups tbody[data-group="{entry["group"]}"]')
        chips = {
            chip.get_attribute("data-pod"): (
                chip.get_attribute("data-state"),
                chip.find_element(By.CSS_SELECTOR, ".node").text,
            )
            for chip in group.find_elements(By.CSS_SELECTOR, "li.member")
        }
        assert chips == {m["pod"]: (m["state"], m["node"] or "—") for m in entry["members"]}
        if entry["plan"] is not None:
            assert group.find_element(By.CSS_SELECTOR, ".domain").text == entry["plan"]["domain"]
        else:
            assert group.find_element(By.CSS_SELECTOR, ".reason").text == entry["reason"]
    planned = next(g for g in gangs["groups"] if g["group"] == PLANNED)
    assert sorted(m["state"] for m in planned["members"]) == ["binding", "bound", "held"]
    # The member states take the Cluster page's colours: bound as allocated GPUs, binding as assumed ones.
    colour = (
        "var s = getComputedStyle(document.querySelector(arguments[0])); return s.backgroundColor + s.backgroundImage"
    )
    for state, cell in (("bound", "allocated"), ("binding", "assumed")):
        drawn = ui.driver.execute_script(colour, f'#groups li[data-state="{state}"] .cell')
        assert drawn == ui.driver.execute_script(colour, f".legend .cell.{cell}") != "rgba(0, 0, 0, 0)none"
    decisions = [
        (r.get_attribute("data-group"), r.get_attribute("data-outcome"))
        for r in ui.find_all("#gang-decisions tbody tr")
    ]
    assert decisions == [(d["group"], d["outcome"]) for d in reversed(gangs["decisions"])]
    # The state list submits itself, "any" too.
    select = ui.find('select[name="state"]')
    Select(select).select_by_value("waiting")
    ui.submit_and_wait(select, "state=waiting")
    assert [g.get_attribute("data-group") for g in ui.find_all("#groups tbody[data-group]")] == [SHORT]
    select = ui.find('select[name="state"]')
    Select(select).select_by_value("")
    ui.submit_and_wait(select, "state=&")
    assert len(ui.find_all("#groups tbody[data-group]")) == 3
    box = ui.find('input[name="group"]')
    box.send_keys("pretrain")
    box.submit()
    ui.submit_and_wait(box, "group=pretrain")
    assert {r.get_attribute("data-group") for r in ui.find_all("#gang-decisions tbody tr")} == {TOO_BIG}
    assert ui.severe() == []


def test_decisions_newest_first_and_by_pod(ui: Console) -> None:
    debug = ui.extender.get_json("/debug")
    decisions = [(d["time"], d["verb"], d["pod"]) for d in debug["decisions"]]
    decisions += [(d["time"], d["verb"], d["pod"]) for d in ui.extender.get_json("/debug/queues")["decisions"]]
    decisions += [(d["time"], "gang", d["group"]) for d in debug["gangs"]["decisions"]]
    newest = max(decisions)
    ui.open("/ui/decisions")
    first = ui.find("#decisions tbody tr")
    who = first.get_attribute("data-group" if newest[1] == "gang" else "data-pod")
    assert (first.get_attribute("data-verb"), who) == newest[1:]
    box = ui.find('input[name="pod"]')
    box.send_keys(ADMITTED)
    box.submit()
    ui.submit_and_wait(box, f"pod={ADMITTED}")
    pods = {r.get_attribute("data-pod") for r in ui.find_all("#decisions tbody tr")}
    assert pods == {f"ml-train/{ADMITTED}"}
    assert "bind" in {r.get_attribute("data-verb") for r in ui.find_all("#decisions tbody tr")}


def test_explain_a_pending_pod_and_a_pasted_one(ui: Console) -> None:
    ui.open("/ui/explain")
    select = ui.find("#pending-pod")
    option = next(o for o in Select(select).options if o.text == f"ml-train/{WAITING}")
    Select(select).select_by_value(option.get_attribute("value"))
    ui.submit_and_wait(select, "pod=")
    assert ui.text("#explain-result").startswith(f"ml-train/{WAITING}: 0 of ")
    # A pasted pod: the same answer as POST /debug/explain.
    body = (EXAMPLES / "requests" / "gpu-pod.json").read_text()
    expected = ui.extender.post_json("/debug/explain", json.loads(body))
    area = ui.find('#explain-form textarea[name="pod"]')
    ui.driver.execute_script("arguments[0].value = arguments[1]", area, body)  # as a paste: no key events
    button = ui.find('#explain-form button[type="submit"]')
    button.click()
    ui.submit_and_wait(button, "/ui/explain")
    passing = sum(n["filter"]["passed"] for n in expected["nodes"])
    assert ui.text("#explain-result") == f"{expected['pod']}: {passing} of {len(expected['nodes'])} nodes pass"
    best = next(n for n in expected["nodes"] if n["score"] == 10)
    assert ui.text(f'tr[data-node="{best["name"]}"] .score') == "10"
    assert ui.severe() == []


def test_health(ui: Console) -> None:
    debug = ui.extender.get_json("/debug?nodes=false")
    ui.open("/ui/health")
    assert ui.text("#ready") == ("ready" if debug["ready"] else "not ready")
    assert ui.text("#ledger-size") == str(len(debug["assumeLedger"]))
    sources = [r.get_attribute("data-source") for r in ui.find_all("#sources tr[data-source]")]
    assert sources == sorted(debug["cache"]["sources"])


def test_bad_input_is_a_message_on_the_page(ui: Console) -> None:
    ui.open("/ui/cluster?page=abc")
    assert ui.text("#error") == "page must be a whole number, got 'abc'"
    ui.open("/ui/explain")
    area = ui.find('#explain-form textarea[name="pod"]')
    area.send_keys("kind: Deployment\nmetadata: {name: d}")
    button = ui.find('#explain-form button[type="submit"]')
    button.click()
    ui.submit_and_wait(button, "/ui/explain")
    assert ui.text("#error") == "expected kind Pod, got 'Deployment'"
    # The only console errors: the two 400 answers themselves.
    assert all("400" in entry["message"] for entry in ui.severe())
