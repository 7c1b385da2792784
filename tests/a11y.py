"""axe-core in a Playwright page: the WCAG 2.1 A/AA violations of what the page shows now.

axe-core comes from the ``axe-playwright-python`` package (it bundles ``axe.min.js``);
the script is injected into the page and ``axe.run`` is called with the WCAG 2.0/2.1
A and AA tags only. ``exclude`` takes CSS selectors of elements whose markup is not
ours (JupyterHub's, JupyterLab's): each caller names whose markup it is. No rule is
ever disabled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# Each finding (surface, rule, count) is appended here when set: the audit's record.
RECORD = os.environ.get("COMPUTEHUB_A11Y_RECORD")


def _axe_script() -> str:
    from axe_playwright_python.base import AXE_SCRIPT    # the 'test' extra installs it
    return AXE_SCRIPT


def violations(page, include: list[str] | None = None, exclude: list[str] = ()) -> list[dict]:
    """axe's violations (WCAG 2.1 A/AA) in ``include`` (default: the document) minus ``exclude``."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(_axe_script())
    context = {"exclude": [[s] for s in exclude]}
    if include:
        context["include"] = [[s] for s in include]
    return page.evaluate(
        """([context, tags]) => axe.run(context.include ? context : {exclude: context.exclude},
                                        {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})
                               .then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                   nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html,
                                                              summary: n.failureSummary}))})))""",
        [context, TAGS])


def report(where: str, found: list[dict]) -> str:
    lines = [f"{where}: {len(found)} axe rule(s) violated"]
    for v in found:
        lines.append(f"- {v['id']} ({v['impact']}, {len(v['nodes'])} element(s)): {v['help']}")
        for n in v["nodes"][:6]:
            lines.append(f"    {n['target']}: {n['html'][:160]}")
            lines.append("      " + (n["summary"] or "").replace("\n", "\n      ")[:400])
    return "\n".join(lines)


def assert_accessible(page, where: str, include: list[str] | None = None, exclude: list[str] = ()) -> None:
    found = violations(page, include, exclude)
    if RECORD:
        with Path(RECORD).open("a") as f:
            for v in found:
                f.write(json.dumps({"surface": where, "rule": v["id"], "count": len(v["nodes"])}) + "\n")
    assert not found, report(where, found)


def focus_outline(page) -> dict:
    """How the focused element shows its focus: its tag and text, its computed outline, and the
    contrast of the outline with what it is drawn on (the element's own background when the
    outline is inside it, else the first opaque background around it)."""
    return page.evaluate("""() => {
        const e = document.activeElement, s = getComputedStyle(e);
        const rgba = c => (c.match(/[\\d.]+/g) || []).map(Number);
        const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92
                                                         : Math.pow((v + 0.055) / 1.055, 2.4); })
                                            .reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
        let under = parseFloat(s.outlineOffset) < 0 ? e : e.parentElement, bg = [255, 255, 255];
        for (; under; under = under.parentElement) {
            const c = rgba(getComputedStyle(under).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) { bg = c.slice(0, 3); break; }
        }
        const ring = rgba(s.outlineColor).slice(0, 3), [a, b] = [lum(ring), lum(bg)];
        return {tag: e.tagName.toLowerCase(), text: (e.innerText || e.value || '').trim().slice(0, 80),
                outline: s.outlineStyle, width: parseFloat(s.outlineWidth) || 0, color: s.outlineColor,
                background: `rgb(${bg.join(', ')})`,
                contrast: Math.round((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05) * 100) / 100};
    }""")


def focus_steadily(locator, hold: float = 1.0, within: float = 15.0) -> None:
    """Focus ``locator`` and make sure it keeps the focus for ``hold`` seconds: JupyterLab gives
    the focus to its Launcher when it opens it, which on a loaded machine may come after the
    page looked ready; then focus it again (up to ``within`` seconds)."""
    import time

    page, deadline = locator.page, time.monotonic() + within
    while True:
        locator.focus()
        held = time.monotonic() + hold
        while time.monotonic() < held and locator.evaluate("e => e === document.activeElement"):
            page.wait_for_timeout(100)
        if time.monotonic() >= held:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"the focus does not stay on {locator}: something else takes it")


def focus_visibly(locator) -> dict:
    """Focus ``locator`` (``focus_steadily``) and say how its focus shows (``focus_outline``),
    focusing it again when something else took the focus before it was measured."""
    for _ in range(5):
        focus_steadily(locator, hold=2.0)
        shown = focus_outline(locator.page)
        if locator.evaluate("e => e === document.activeElement"):
            return shown
    raise AssertionError(f"the focus does not stay on {locator}: something else takes it")


def shows_focus(f: dict) -> bool:
    """``focus_outline``'s answer is a solid outline of 2px or more at 3:1 or more (WCAG 2.4.7, 1.4.11)."""
    return f["outline"] not in ("none", "") and f["width"] >= 2 and f["contrast"] >= 3


def focus_visible(page) -> bool:
    """The focused element draws a solid outline of 2px or more, at 3:1 or more against what is
    around it (WCAG 2.4.7, and 1.4.11 for the indicator's contrast)."""
    f = focus_outline(page)
    return f["outline"] not in ("none", "") and f["width"] >= 2 and f["contrast"] >= 3
