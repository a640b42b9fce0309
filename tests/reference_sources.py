"""Read a value out of py-faster-rcnn's sources, the paper notes or Detectron2, by the locators of FIDELITY.md.

A locator is `FILE:SELECTOR` (FIDELITY.md's *source* column, in backticks):

- `config.py:__C.TEST.NMS`          lib/fast_rcnn/config.py, the assigned literal (np.array(...) read as its list)
- `end2end.yml:TRAIN.BG_THRESH_LO`  experiments/cfgs/faster_rcnn_end2end.yml (overrides config.py in end2end runs)
- `end2end.sh:pascal_voc.ITERS`     experiments/scripts/faster_rcnn_end2end.sh, a variable of one `case` branch
- `coco/train.prototxt:rpn-data.python_param.param_str.scales`   models/<dataset>/VGG16/faster_rcnn_end2end/...:
  a layer by name, then fields; `param[1]` picks a repeated field; a param_str is read as the YAML it is; a
  field the file omits reads as Caffe's default (CAFFE_DEFAULTS); a layer the file lacks reads as None
- `test.py:test_net(thresh)`        a function's default argument; `anchor_target_layer.py:get('allowed_border')`
  the default of a `.get(key, default)` call; `pascal_voc.py:{'use_diff'}` the value of a dict-literal key
- `prototxt/ResNet-101-deploy.prototxt:res3a_branch2a.convolution_param.stride`  MSRA's released prototxts
  (../shared/reference/prototxt), read as the py-faster-rcnn prototxts
- `d2:MODEL.RPN.NMS_THRESH`         Detectron2's default config (detectron2.config.get_cfg())
- `PAPER.md:"quoted words"`         the words occur in ../shared/PAPER.md (whitespace-insensitive): True or False;
  `FILE:"quoted code"` the same for any source file above

Every read fails with an error naming the file and the selector when the location does not exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

# Fields Caffe fills in when a prototxt omits them (BVLC caffe.proto; SmoothL1LossParameter from py-faster-rcnn's
# caffe-fast-rcnn fork): what the source *means* when it is silent.
CAFFE_DEFAULTS = {"lr_mult": 1.0, "decay_mult": 1.0, "sigma": 1.0, "dropout_ratio": 0.5}

PROTOTXT_DIRS = {"coco": "models/coco/VGG16/faster_rcnn_end2end",
                 "pascal_voc": "models/pascal_voc/VGG16/faster_rcnn_end2end"}
NAMED_FILES = {"config.py": "lib/fast_rcnn/config.py", "end2end.yml": "experiments/cfgs/faster_rcnn_end2end.yml",
               "end2end.sh": "experiments/scripts/faster_rcnn_end2end.sh"}

_ABSENT = object()


class LocatorError(LookupError):
    pass


# ---- Caffe prototxt (protobuf text format) ----------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:#[^\n]*\n?|(\{)|(\})|("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|([\w.+-]+)\s*(:)?)')


def parse_prototxt(text: str) -> list[tuple[str, object]]:
    """A message as a list of (field, value) pairs in file order; a nested message's value is such a list."""
    stack: list[list] = [[]]
    pos, key = 0, None
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"prototxt: cannot read {text[pos:pos + 30]!r}")
        pos = m.end()
        opening, closing, string, word, colon = m.groups()
        if opening:
            if key is None:
                raise ValueError("prototxt: '{' without a field name")
            child: list = []
            stack[-1].append((key, child))
            stack.append(child)
            key = None
        elif closing:
            stack.pop()
        elif string is not None:
            stack[-1].append((key, bytes(string[1:-1], "utf-8").decode("unicode_escape")))
            key = None
        elif word is not None:
            if key is None:
                key = word  # a field name (followed by ':' or '{')
                if not colon and not re.match(r"\s*\{", text[pos:]):
                    raise ValueError(f"prototxt: field {word!r} without ':' or '{{'")
            else:
                stack[-1].append((key, _scalar(word)))
                key = None
    return stack[0]


def _scalar(word: str):
    for cast in (int, float):
        try:
            return cast(word)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(word, word)


def _prototxt_value(message: list, selector: str):
    parts = selector.split(".")
    layers = [v for k, v in message if k == "layer"]
    node: object = message
    if layers:  # a net: the first part names a layer
        named = [lay for lay in layers if ("name", parts[0]) in lay]
        if not named:
            return None  # the net has no such layer
        node, parts = named[0], parts[1:]
    for part in parts:
        if isinstance(node, dict):  # inside a param_str
            if part not in node:
                raise LocatorError(f"no key {part!r} in param_str {node!r}")
            node = node[part]
            continue
        m = re.fullmatch(r"([\w]+)(?:\[(\d+)\])?", part)
        field, index = m.group(1), int(m.group(2) or 0)
        values = [v for k, v in node if k == field]
        if index >= len(values):
            if parts[-1] in CAFFE_DEFAULTS:  # the field, or the message holding it, is omitted
                return CAFFE_DEFAULTS[parts[-1]]
            raise LocatorError(f"no field {part!r}")
        node = values[index]
        if field == "param_str":
            node = yaml.safe_load(node.replace("!!python/tuple", ""))
    return node


# ---- Python sources (py-faster-rcnn is Python 2: read by pattern, values by ast.literal_eval) -----------------

def _literal(source: str):
    source = source.split("#", 1)[0].strip()
    if m := re.fullmatch(r"np\.(?:array|asarray)\((.*)\)", source, re.S):
        source = m.group(1)
    return ast.literal_eval(source)


def _until_closing(text: str, start: int) -> str:
    """text[start:] up to the ')' that closes the call it is in (brackets inside are balanced)."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] in "([{"
        if text[i] in ")]}":
            if depth == 0:
                return text[start:i]
            depth -= 1
    raise ValueError("unbalanced brackets")


def _python_value(text: str, selector: str):
    if m := re.fullmatch(r"(\w+)\((\w+)\)", selector):  # a function's default argument
        fn, arg = m.groups()
        sig = re.search(rf"^\s*def {fn}\((.*?)\):", text, re.M | re.S)
        if not sig:
            return _ABSENT
        args = ast.parse(f"def f({sig.group(1)}): pass").body[0].args
        named = args.args[len(args.args) - len(args.defaults):]
        return next((ast.literal_eval(d) for a, d in zip(named, args.defaults) if a.arg == arg), _ABSENT)
    if m := re.fullmatch(r"get\('(\w+)'\)", selector):  # the default of a .get('key', default) call
        found = re.search(rf"\.get\(\s*'{m.group(1)}'\s*,", text)
        return _literal(_until_closing(text, found.end())) if found else _ABSENT
    if m := re.fullmatch(r"\{'(\w+)'\}", selector):  # a dict literal's value for a key
        found = re.search(rf"'{m.group(1)}'\s*:\s*([^,}}\n]+)", text)
        return _literal(found.group(1)) if found else _ABSENT
    found = re.search(rf"^{re.escape(selector)}\s*=\s*(.+)$", text, re.M)  # an assignment, e.g. __C.TEST.NMS
    return _literal(found.group(1)) if found else _ABSENT


# ---- dispatch ---------------------------------------------------------------------------------------------------

def resolve_file(pfr: Path, name: str) -> Path:
    if name in NAMED_FILES:
        return pfr / NAMED_FILES[name]
    if m := re.fullmatch(r"(coco|pascal_voc)/(train|test|solver)\.prototxt", name):
        return pfr / PROTOTXT_DIRS[m.group(1)] / f"{m.group(2)}.prototxt"
    found = sorted(pfr.glob(f"lib/**/{name}"))
    if len(found) != 1:
        raise LocatorError(f"{name!r}: {len(found)} files of that name under {pfr / 'lib'}")
    return found[0]


def read_value(locator: str, shared: Path):
    """The value at `locator`; for a PAPER.md locator, True when the quoted words are there."""
    name, sep, selector = locator.partition(":")
    if not sep or not selector:
        raise LocatorError(f"{locator!r}: a locator is FILE:SELECTOR")
    if name == "PAPER.md":
        words = re.fullmatch(r'"(.+)"', selector)
        if not words:
            raise LocatorError(f"{locator!r}: PAPER.md locators quote the words, PAPER.md:\"...\"")
        paper = " ".join((shared / "PAPER.md").read_text(encoding="utf-8").split())
        return " ".join(words.group(1).split()) in paper
    if name == "d2":
        from detectron2.config import get_cfg

        node = get_cfg()
        for part in selector.split("."):
            if part not in node:
                raise LocatorError(f"{locator!r}: Detectron2's config has no {part!r}")
            node = node[part]
        return node
    if name.startswith("prototxt/"):  # MSRA's released ResNet prototxts beside py-faster-rcnn
        path = shared / "reference" / name
    else:
        path = resolve_file(shared / "reference" / "py-faster-rcnn", name)
    if not path.is_file():
        raise LocatorError(f"{locator!r}: {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if words := re.fullmatch(r'"(.+)"', selector):  # quoted code: it occurs in the file
        return " ".join(words.group(1).split()) in " ".join(text.split())
    try:
        if path.suffix == ".prototxt":
            return _prototxt_value(parse_prototxt(text), selector)
        if path.suffix == ".yml":
            value = yaml.safe_load(text)
            for part in selector.split("."):
                value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
        elif path.suffix == ".sh":
            case, _, var = selector.partition(".")
            block = re.search(rf"^\s*{re.escape(case)}\)\n(.*?);;", text, re.M | re.S)
            found = block and re.search(rf"^\s*{re.escape(var)}=(\S+)", block.group(1), re.M)
            if not found:
                raise LocatorError(f"no {var}= in the {case}) branch")
            value = _scalar(found.group(1).strip('"'))
        else:
            value = _python_value(text, selector)
    except (LocatorError, ValueError, SyntaxError) as err:
        raise LocatorError(f"{path}: {selector}: {err}") from None
    if value is _ABSENT:
        raise LocatorError(f"{path}: {selector} not found")
    return value
