"""Console themes as data: YAML files in ``themes/`` checked by pydantic, turned into Textual themes.

A theme names Textual's base colours and the heatmap's palette (a low-to-high colour scale and
the colours that mark empty, cordoned, failed and stale cells). A broken theme file is reported
with its path and the field, never fatal: the console falls back to the default ``dark``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.color import Color, ColorParseError
from textual.theme import Theme

from usher.engine.scenario.limits import CONFIG_LIMITS
from usher.engine.scenario.yamltree import YamlLimitError, load_bounded, read_text_bounded

DEFAULT_THEME = "dark"


def _colour(value: str) -> str:
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"{value!r} is not a colour (use #RRGGBB or a colour name)") from None
    return value


class Colors(BaseModel):
    model_config = ConfigDict(extra="forbid")
    primary: str
    secondary: str | None = None
    accent: str | None = None
    foreground: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    success: str | None = None
    warning: str | None = None
    error: str | None = None

    @field_validator("*")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        return None if v is None else _colour(v)


class HeatmapColors(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scale: list[str] = Field(min_length=2)
    empty: str
    cordoned: str
    failed: str
    stale: str

    @field_validator("scale")
    @classmethod
    def _check_scale(cls, v: list[str]) -> list[str]:
        return [_colour(c) for c in v]

    @field_validator("empty", "cordoned", "failed", "stale")
    @classmethod
    def _check(cls, v: str) -> str:
        return _colour(v)


class ThemeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    dark: bool = True
    colors: Colors
    heatmap: HeatmapColors


@dataclass(slots=True, frozen=True)
class HeatmapPalette:
    scale: tuple[Color, ...]
    empty: Color
    cordoned: Color
    failed: Color
    stale: Color

    def at(self, fraction: float) -> Color:
        """The scale's colour at ``fraction`` (0..1), blended between its stops."""
        f = min(1.0, max(0.0, fraction)) * (len(self.scale) - 1)
        i = min(int(f), len(self.scale) - 2)
        a, b = self.scale[i].get_truecolor(), self.scale[i + 1].get_truecolor()
        t = f - i
        return Color.from_rgb(a.red + (b.red - a.red) * t, a.green + (b.green - a.green) * t, a.blue + (b.blue - a.blue) * t)


@dataclass(slots=True, frozen=True)
class UsherTheme:
    textual: Theme
    heatmap: HeatmapPalette
    source: str


def _convert(spec: ThemeFile, source: str) -> UsherTheme:
    colors = spec.colors.model_dump(exclude_none=True)
    h = spec.heatmap
    palette = HeatmapPalette(
        tuple(Color.parse(c) for c in h.scale),
        Color.parse(h.empty),
        Color.parse(h.cordoned),
        Color.parse(h.failed),
        Color.parse(h.stale),
    )
    return UsherTheme(Theme(name=f"usher-{spec.name}", dark=spec.dark, **colors), palette, source)


def load_theme_text(text: str, source: str) -> UsherTheme:
    """Parse one theme file's text; ``ValueError`` naming ``source`` and the field when broken.

    The text is read within ``CONFIG_LIMITS`` (1 MiB, nesting, aliases), like every YAML usher reads.
    """
    try:
        data = load_bounded(text, CONFIG_LIMITS)
    except YamlLimitError as exc:
        raise ValueError(exc.describe(source)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{source}{where}: not valid YAML") from None
    try:
        return _convert(ThemeFile.model_validate(data), source)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ValueError(f"{source}: {path}: {err['msg']}") from None


def load_themes(extra_dirs: list[Path] | None = None) -> tuple[dict[str, UsherTheme], list[str]]:
    """Every theme shipped in ``usher.themes`` and in ``extra_dirs``; broken files become errors."""
    themes: dict[str, UsherTheme] = {}
    errors: list[str] = []
    files: list[tuple[str, str]] = []
    for entry in sorted(resources.files("usher.themes").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            files.append((f"themes/{entry.name}", entry.read_text()))
    for folder in extra_dirs or []:
        for path in sorted(folder.glob("*.yaml")):
            try:  # no more than CONFIG_LIMITS.max_bytes of it, whatever it is
                files.append((str(path), read_text_bounded(path, CONFIG_LIMITS)))
            except YamlLimitError as exc:
                errors.append(exc.describe(str(path)))
            except OSError as exc:
                errors.append(f"{path}: cannot read: {exc.strerror or exc}")
            except UnicodeDecodeError:
                errors.append(f"{path}: cannot read: not UTF-8 text")
    for source, text in files:
        try:
            theme = load_theme_text(text, source)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        themes[theme.textual.name.removeprefix("usher-")] = theme
    return themes, errors


def user_theme_dir() -> Path:
    """Where an operator's own themes live (``$XDG_CONFIG_HOME/usher/themes``)."""
    import os

    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "usher" / "themes"
