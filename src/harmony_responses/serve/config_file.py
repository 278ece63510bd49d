"""``--config PATH``: ``serve``'s options from a TOML file, read by the same ``options.OPTIONS`` table.

Each key is an option's flag without ``--``, as written on the command line (``engine-url``, ``model``,
``api-key``); a value is what the flag takes, as a TOML string or number, checked by the option's own
type function and choices, so a bad value gets the same message as on the command line. Repeatable
options take an array (a single string is one item), switches ``true`` or ``false``. A flag on the
command line wins over its environment variable, which wins over the file, which wins over the default.

Besides options, the file may hold ``[[keys]]`` tables: API keys with their limits and service tiers
(``quotas._limits`` says which fields), accepted as ``--api-key`` keys are.

The file may hold secrets (``api-key``, ``engine-api-key``, ``secret-key``): they stay out of ``ps``,
unlike flags; keep the file readable by the server's user only.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from typing import Any

from ..quotas import parse_keys
from .options import OPTIONS, Option, env_value, given_on_command_line

__all__ = ["BY_KEY", "apply_config_file", "read_config_file"]

# read_config_file's entry for the [[keys]] tables (a list of quotas.KeyLimits), and args' attribute for them.
KEYS = "keys"
BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS if option.key != "config"}


def read_config_file(path: str) -> dict[str, Any]:
    """The file's options: ``{option.name: value}``, each value checked and converted as its flag's would be.

    Raises:
        ValueError: the file cannot be read or parsed, a key names no option (the message names the
            nearest one), or a value is not one its option accepts.
    """
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {path}: not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key == "keys":  # [[keys]]: limited API keys, not an option
            values[KEYS] = parse_keys(value, where=f"config file {path}")
            continue
        option = BY_KEY.get(key)
        if option is None:
            nearest = difflib.get_close_matches(key.replace("_", "-"), BY_KEY, n=1, cutoff=0.6)
            hint = f" (did you mean '{nearest[0]}'?)" if nearest else f"; valid keys: {', '.join(BY_KEY)}"
            raise ValueError(f"config file {path}: unknown key '{key}'{hint}")
        try:
            values[option.name] = _convert(option, value)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise ValueError(f"config file {path}: {key}: {exc}") from None
    return values


def _convert(option: Option, value: Any) -> Any:
    if option.switch:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if option.repeatable:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
            raise ValueError(f"expected an array of strings, got {value!r}")
        return list(items)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a string or a number, got {value!r}")
    text = str(value)
    converted = option.type(text) if option.type is not None else text
    if option.choices is not None and converted not in option.choices:
        raise ValueError(f"invalid choice {text!r} (choose from {', '.join(option.choices)})")
    return converted


def apply_config_file(args: argparse.Namespace) -> None:
    """Fill ``args`` from ``args.config`` (if set) where neither a flag nor an environment variable set a value.

    Raises:
        ValueError: see ``read_config_file``.
    """
    path = getattr(args, "config", None)
    if not path:
        return
    given = given_on_command_line(args)
    for name, value in read_config_file(path).items():
        if name == KEYS:
            setattr(args, KEYS, value)
            continue
        option = next(option for option in OPTIONS if option.name == name)
        if name in given or env_value(option) is not None:
            continue
        setattr(args, name, value)
