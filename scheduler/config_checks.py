"""Settings checked at start, for ComputeHub's long-running commands (``computehub serve``,
``computehub-launcher``, ``computehub-inventory``, the notebook watch).

A mistaken setting stops the command before it does anything, with one line on stderr
naming the setting, the value and what is expected, and exit status 2; never a
traceback, and never a setting silently ignored (a config file that is not there or
does not load, an unknown option, a misspelt setting of the command's own classes).

``StrictConfig`` is mixed into such a ``traitlets`` Application; ``launch`` runs one.
The ``check_*`` helpers are for ``@validate`` handlers: they raise ``ConfigError``.
It lives in ``scheduler/``, which every other package depends on, so that the service
(``hub_ext``) and the commands of ``spawner/`` share it without importing each other;
it needs nothing but traitlets.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import string
import sys
from urllib.parse import urlparse

from traitlets import TraitError
from traitlets.config import Application
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader, _KVArgParser

USAGE_EXIT = 2


class ConfigError(TraitError):
    """A setting a person must fix: one line, exit status ``status`` (2: fix the input)."""

    def __init__(self, message: str, status: int = USAGE_EXIT):
        super().__init__(message)
        self.status = status


# --- checks for @validate handlers ------------------------------------------------------

def check_number(setting: str, value, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, unit: str = "", off: float | None = None) -> float:
    """A finite ``value`` within [low, high] (``low_open``: above ``low``); ``off`` is also allowed."""
    if off is not None and value == off and not isinstance(value, bool):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (low is not None and (value <= low if low_open else value < low)) \
            or (high is not None and value > high):
        if low is None:
            what = "a number" if high is None else f"at most {high:g}"
        elif high is None:
            what = f"greater than {low:g}" if low_open else f"at least {low:g}"
        else:
            what = f"above {low:g} and at most {high:g}" if low_open else f"from {low:g} to {high:g}"
        also = f" (or {off:g}: off)" if off is not None else ""
        raise ConfigError(f"{setting} must be {what}{_of(unit)}{also}, not {value!r}")
    return value


def _of(unit: str) -> str:
    return f" ({unit})" if unit else ""


def check_template(setting: str, value: str, fields: tuple[str, ...], required: tuple[str, ...] = (),
                   why: str = "") -> str:
    """A ``str.format`` template using only ``fields``, and each of ``required``."""
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
    except ValueError as e:
        raise ConfigError(f"{setting} = {value!r} is not a valid template ({e}); use "
                          f"{', '.join('{' + f + '}' for f in fields)}") from None
    names = {f.split(".")[0].split("[")[0] for f in used}
    unknown = sorted(n for n in names if n not in fields)
    if unknown or any(f == "" or f.isdigit() for f in names):
        bad = ", ".join("{" + n + "}" for n in unknown) or "{}"
        raise ConfigError(f"{setting} = {value!r} uses {bad}; it may use only "
                          f"{', '.join('{' + f + '}' for f in fields)}")
    missing = [f for f in required if f not in names]
    if missing:
        raise ConfigError(f"{setting} = {value!r} lacks {', '.join('{' + f + '}' for f in missing)}"
                          + (f": {why}" if why else ""))
    return value


def check_url(setting: str, value: str, *, empty_ok: bool = False) -> str:
    """An http(s) URL with a host."""
    if empty_ok and value == "":
        return value
    try:
        u = urlparse(value)
        u.port                                  # noqa: B018 - raises for a bad port
    except ValueError as e:
        raise ConfigError(f"{setting} = {value!r} is not a URL ({e})") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(f"{setting} must be an http:// or https:// URL with a host, e.g. "
                          f"http://127.0.0.1:10101, not {value!r}")
    return value


# A Kubernetes extended resource name (nvidia.com/gpu): an optional DNS-subdomain prefix, then a name.
RESOURCE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def check_resource_name(setting: str, value: str) -> str:
    if not RESOURCE.match(value):
        raise ConfigError(f"{setting} must be a resource name like nvidia.com/gpu, not {value!r}")
    return value


def check_existing_file(setting: str, value: str) -> str:
    if value and not os.path.isfile(value):
        raise ConfigError(f"{setting}: no such file {value!r} (give an existing file, or '' for the default)")
    return value


def recheck(obj, names=None) -> None:
    """Validate current values, defaults included (traitlets checks only what was set): a
    default read from the environment ($POD_NAMESPACE, $COMPUTEHUB_URL) is a setting too."""
    for name in names or obj.trait_names(config=True):
        obj.set_trait(name, getattr(obj, name))


# --- the application side ---------------------------------------------------------------

class _Parser(_KVArgParser):
    def error(self, message):       # argparse would print its usage and exit
        raise ConfigError(message)


class _Loader(KVArgParseConfigLoader):
    parser_class = _Parser

    def _handle_unrecognized_alias(self, arg: str) -> None:
        raise ConfigError(f"unknown option --{arg} (see --help)")


class StrictConfig:
    """Mixed into an ``Application`` (before it): bad settings raise instead of being logged.

    ``owned_config_classes()`` names the classes whose config sections this command owns:
    a setting there that is no trait of the class is a misspelling, refused with the nearest
    name. Sections of other commands (a config file shared with the service) are left alone.
    """

    raise_config_file_errors = True
    config_file_trait = "config_file"

    def _create_loader(self, argv, aliases, flags, classes):
        return _Loader(argv, aliases, flags, classes=classes, log=self.log)

    def parse_command_line(self, argv=None):
        Application.parse_command_line.__wrapped__(self, argv)
        if self.extra_args:
            raise ConfigError(f"unexpected argument {self.extra_args[0]!r} (see --help)")

    def owned_config_classes(self) -> list[type]:
        return [type(self)]

    def load_config_file(self, filename, path=None):
        """Load ``filename`` (.py or .json); a file named on purpose must exist and load."""
        setting = f"{type(self).__name__}.{self.config_file_trait}"
        explicit = self.config_file_trait in self.config.get(type(self).__name__, {})
        if not os.path.exists(filename):
            if explicit:
                raise ConfigError(f"config file {filename!r} does not exist ({setting}, --config)")
            return
        if os.path.splitext(filename)[1] not in (".py", ".json"):
            raise ConfigError(f"config file {filename!r} must be a Python (.py) or JSON (.json) file")
        try:
            Application.load_config_file.__wrapped__(self, filename, path)
        except TraitError:
            raise
        except SyntaxError as e:
            raise ConfigError(f"config file {filename} line {e.lineno}: {e.msg}") from None
        except Exception as e:      # noqa: BLE001 - whatever the file raised, said in one line
            where = _config_line(e, filename)
            text = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ConfigError(f"config file {filename}{where}: {type(e).__name__}"
                              + (f": {text}" if text else "")) from None

    def _load_config(self, cfg, section_names=None, traits=None):
        self.check_config_sections(cfg)     # before traitlets warns about them and goes on
        return super()._load_config(cfg, section_names, traits)

    def check_config_sections(self, cfg=None) -> None:
        """Refuse misspelt settings of the command's own classes, and misspelt class names."""
        cfg = self.config if cfg is None else cfg
        owned = {c.__name__: c for c in self.owned_config_classes()}
        for section in list(cfg):
            if not section[:1].isupper():
                raise ConfigError(f"config setting {section!r} names no class; write "
                                  f"c.{type(self).__name__}.{section} (JSON: {{\"{type(self).__name__}\": "
                                  f"{{\"{section}\": ...}}}})")
            if section in owned:
                cls = owned[section]
                names = cls.class_trait_names(config=True)
                for key in cfg[section]:
                    if key not in names:
                        near = difflib.get_close_matches(key, names, 1)
                        raise ConfigError(f"{section}.{key} is not a setting"
                                          + (f" (did you mean {section}.{near[0]}?)" if near else
                                             f" (see {self.name} --help-all)"))
            else:
                near = difflib.get_close_matches(section, known_sections(), 1, 0.85)
                if near and near[0] != section:
                    raise ConfigError(f"config section {section!r} is no ComputeHub class "
                                      f"(did you mean {near[0]}?)")


def known_sections() -> list[str]:
    """Every ComputeHub command's config class names (a shared config file may hold them all)."""
    return ["ComputeHubService", "EngineConfig", "LauncherApp", "LauncherBackend", "LocalLauncher",
            "KubeLauncher", "InventoryApp", "KubeInventory", "NotebookWatch"]


def _config_line(e: BaseException, filename: str) -> str:
    tb = e.__traceback__
    line = None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(filename):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" line {line}" if line else ""


def describe(e: BaseException) -> str:
    """One line for a settings error (traitlets' own messages made shorter)."""
    import re
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    m = re.match(r"The '(\w+)' trait of (?:an? (\w+)|<[\w.]*?(\w+) object at 0x[0-9a-f]+>) instance "
                 r"(contains .*? which )?(?:expected|must be) (.+?)(?:, not the \w+ (.+?))?\.?$", msg)
    if m:
        trait, cls, cls2, inner, expected, got = m.groups()
        expected = {"an int": "a whole number", "a float": "a number", "a unicode string": "text",
                    "a boolean": "True or False", "a dict": "a mapping"}.get(expected, expected)
        what = f"each entry of {cls or cls2}.{trait} must be" if inner else f"{cls or cls2}.{trait} expects"
        return f"{what} {expected}" + (f", not {got}" if got else "")
    m = re.match(r"The value of the '(\w+)' trait of an? (\w+) instance should not be (less|greater) than "
                 r"(\S+), but a value of (.+) was specified", msg)
    if m:
        trait, cls, side, bound, got = m.groups()
        return f"{cls}.{trait} must be {'at least' if side == 'less' else 'at most'} {bound}, not {got}"
    return msg


def launch(app_class, argv=None) -> None:
    """Run a ``StrictConfig`` application: a settings error is one line on stderr, exit 2."""
    try:
        app = app_class.instance()
        app.initialize(argv)
    except (TraitError, ArgumentError) as e:
        print(f"{app_class.name}: error: {describe(e)}", file=sys.stderr)
        sys.exit(getattr(e, "status", USAGE_EXIT))
    app.start()
