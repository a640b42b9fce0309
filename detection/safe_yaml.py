"""The one reader of YAML files a user hands the project (configs, a run's config.yaml): plain data only, bounded.

yaml.safe_load already refuses tags that construct Python objects; on top of it this refuses, naming the file:
- a file over MAX_BYTES (a 10 MB YAML keeps the parser busy for minutes);
- a duplicate key in one mapping (PyYAML keeps the last silently: `SOLVER:` twice drops the first's settings;
  a merge key's `<<: *base` values may be overridden, as YAML says);
- nesting deeper than MAX_DEPTH (the parser recurses: RecursionError);
- a document whose aliases expand to more than MAX_VALUES values ("billion laughs": a 531-byte file loads as
  shared references, then yacs, OmegaConf or json.dumps expand them until memory runs out).
"""

from __future__ import annotations

import os

import yaml

__all__ = ["ConfigFileError", "load_yaml", "MAX_BYTES", "MAX_DEPTH", "MAX_VALUES"]

MAX_BYTES = 1 << 20  # 1 MiB: the largest config here is ~5 KB
MAX_DEPTH = 64  # configs nest 3-4 levels
MAX_VALUES = 100_000  # scalars and containers after alias expansion; a full Detectron2 config has ~700


class ConfigFileError(ValueError):
    """A config file that cannot be used as it is; the message names the file (and the line where known)."""


class _PlainDataError(yaml.constructor.ConstructorError):
    """Plain YAML that is still unusable (a key given twice, a merge of something not a mapping), as opposed to a
    tag that would construct Python objects."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` is plain YAML: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise _PlainDataError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1}; YAML would keep only the "
                    "last one)", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        if isinstance(node, yaml.MappingNode):
            try:
                self.flatten_mapping(node)  # merge keys in, the node's own keys after them (they win)
            except yaml.constructor.ConstructorError as err:  # `<<: 5`
                raise _PlainDataError(None, None, f"a merge key (<<) {err.problem}", err.problem_mark) from None
        return super().construct_mapping(node, deep=deep)


def _expanded_size(data, path: str) -> None:
    budget = [MAX_VALUES]
    stack = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigFileError(f"{path}: expands to more than {MAX_VALUES} values through YAML aliases (an alias "
                                  "bomb?); refused")
        if depth > MAX_DEPTH:
            raise ConfigFileError(f"{path}: nested more than {MAX_DEPTH} levels deep; refused")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            stack.extend((k, depth + 1) for k in node)
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def load_yaml(path: str | os.PathLike):
    """The document in `path` as plain Python data, or ConfigFileError saying what is wrong and where."""
    path = str(path)
    try:
        size = os.path.getsize(path)
    except OSError as err:
        raise FileNotFoundError(f"{path}: cannot read ({err.strerror})") from None
    if size > MAX_BYTES:
        raise ConfigFileError(f"{path}: {size / 2**20:.1f} MiB; a config is at most {MAX_BYTES // 2**20} MiB")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_Loader)  # noqa: S506  (_Loader is a SafeLoader)
    except _PlainDataError as err:
        mark = f", line {err.problem_mark.line + 1}" if err.problem_mark else ""
        raise ConfigFileError(f"{path}{mark}: {err.problem}") from None
    except yaml.constructor.ConstructorError as err:
        mark = f", line {err.problem_mark.line + 1}" if err.problem_mark else ""
        raise ConfigFileError(f"{path}{mark}: refused: the file uses a YAML tag that would construct Python objects "
                              f"or run code ({err.problem}). Configs are plain data; remove the tag.") from None
    except yaml.YAMLError as err:
        raise ConfigFileError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    except UnicodeDecodeError as err:
        raise ConfigFileError(f"{path}: not a text file ({err.reason})") from None
    except RecursionError:
        raise ConfigFileError(f"{path}: nested too deeply to parse (more than {MAX_DEPTH} levels); refused") from None
    _expanded_size(data, path)
    return data
