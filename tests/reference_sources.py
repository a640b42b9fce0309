"""Read a value out of py-faster-rcnn's sources, the paper notes or Detectron2, by the locators of FIDELITY.md.

Everything read lives in the repository, under tests/reference (REFERENCE; its MANIFEST.sha256 is checked by
tests/configs/test_reference_manifest.py). A locator is `FILE:SELECTOR` (FIDELITY.md's *source* column, in backticks):

- `config.py:__C.TEST.NMS`          lib/fast_rcnn/config.py, the assigned literal (np.array(...) read as its list)
- `end2end.yml:TRAIN.BG_THRESH_LO`  experiments/cfgs/faster_rcnn_end2end.yml (overrides config.py in end2end runs)
- `end2end.sh:pascal_voc.ITERS`     experiments/scripts/faster_rcnn_end2end.sh, a variable of one `case` branch
- `coco/train.prototxt:rpn-data.python_param.param_str.scales`   models/<dataset>/VGG16/faster_rcnn_end2end/...:
  a layer by name, then fields; `param[1]` picks a repeated field; a param_str is read as the YAML it is. A layer
  or field the file lacks is a LocatorError -- never a silent default. Two explicit suffixes say what the source
  means by leaving something out:
  - `...|default`: the field is omitted and Caffe's default applies (CAFFE_DEFAULTS: the layer types that have the
    field, and caffe.proto's declaration, whose `[default = ...]` is the value), e.g.
    `coco/train.prototxt:conv3_1.param[1].decay_mult|default` reads 1.0. The layer must exist and be of a type
    that has the field; every indexed message on the way (`param[1]`: the layer's second ParamSpec) must exist, so
    only the field itself, or an optional message holding it (`smooth_l1_loss_param`), may be omitted; and the
    field must really be omitted (a set field is an error);
  - `...|absent`: the net has no layer of that *type* (reads None), e.g. `coco/train.prototxt:Dropout|absent`; the
    type must be a layer type of some reference prototxt, so a misspelt type cannot pass as an absent one, and a
    layer renamed in the net cannot hide.
- `test.py:test_net(thresh)`        a function's default argument; `anchor_target_layer.py:get('allowed_border')`
  the default of a `.get(key, default)` call; `pascal_voc.py:{'use_diff'}` the value of a dict-literal key
- `prototxt/ResNet-101-deploy.prototxt:res3a_branch2a.convolution_param.stride`  MSRA's released prototxts
  (tests/reference/prototxt), read as the py-faster-rcnn prototxts
- `d2:MODEL.RPN.NMS_THRESH`         Detectron2's default config (detectron2.config.get_cfg())
- `PAPER.md:"quoted words"`         the words occur in tests/reference/PAPER.md (whitespace-insensitive): True or
  False; `FILE:"quoted code"` the same for any source file above
- `PAPER.md:"quoted words"[i]`      a number of the quoted words (which must occur): the i-th (from 0) of the
  numbers in them, `240k` read as 240000; `[i+j]` their sum. A number is digits with an optional fraction and an
  optional `k`, not part of a name (`conv3_1`, `fc6`, `VGG-16` hold none). The same for quoted code.

Every read fails with a LocatorError naming the locator when the location does not exist.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

REFERENCE = Path(__file__).resolve().parent / "reference"

@dataclass(frozen=True)
class CaffeDefault:
    """A field Caffe fills in when a prototxt omits it: what the source *means* when it is silent."""

    layer_types: tuple[str, ...]  # the layer types whose values the field governs in the reference nets (caffe.proto
    #   lets every layer carry `param`, but only layers with learnable blobs use it): a |default elsewhere is an error
    proto: str  # the caffe.proto and message declaring it
    declaration: str  # the declaring line, verbatim: its `[default = ...]` is the value

    @property
    def value(self):
        m = re.search(r"\[default = ([^\]]+)\]", self.declaration)
        if not m:
            raise LocatorError(f"{self.proto}: {self.declaration!r} declares no default")
        return float(m.group(1)) if "float" in self.declaration.split() else _scalar(m.group(1))


BVLC = "BVLC caffe src/caffe/proto/caffe.proto"
# Keyed by the field path below the layer. Read only through `...|default`.
CAFFE_DEFAULTS = {
    "param.lr_mult": CaffeDefault(("Convolution", "InnerProduct"), f"{BVLC}, message ParamSpec",
                                  "optional float lr_mult = 3 [default = 1.0];"),
    "param.decay_mult": CaffeDefault(("Convolution", "InnerProduct"), f"{BVLC}, message ParamSpec",
                                     "optional float decay_mult = 4 [default = 1.0];"),
    "dropout_param.dropout_ratio": CaffeDefault(("Dropout",), f"{BVLC}, message DropoutParameter",
                                                "optional float dropout_ratio = 1 [default = 0.5]; // dropout ratio"),
    "smooth_l1_loss_param.sigma": CaffeDefault(
        ("SmoothL1Loss",), "py-faster-rcnn's caffe-fast-rcnn fork, src/caffe/proto/caffe.proto, message "
                           "SmoothL1LossParameter", "optional float sigma = 1 [default = 1];"),
}

PROTOTXT_DIRS = {"coco": "models/coco/VGG16/faster_rcnn_end2end",
                 "pascal_voc": "models/pascal_voc/VGG16/faster_rcnn_end2end"}
NAMED_FILES = {"config.py": "lib/fast_rcnn/config.py", "end2end.yml": "experiments/cfgs/faster_rcnn_end2end.yml",
               "end2end.sh": "experiments/scripts/faster_rcnn_end2end.sh"}
SUFFIXES = ("default", "absent")

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


def _layer_field(layer: list, field: str) -> set:
    return {v for f, v in layer if f == field}


def _layers_of(message: list, field: str) -> set:
    """The names (field "name") or types (field "type") of a net's layers."""
    return {v for k, lay in message if k == "layer" for v in _layer_field(lay, field)}


def _prototxt_value(message: list, selector: str, suffix: str | None, others: list[Path]):
    """The value at `selector` in a parsed prototxt; `suffix` is None, "default" or "absent" (module docstring)."""
    parts = selector.split(".")
    layers = [v for k, v in message if k == "layer"]
    node: object = message
    if suffix == "absent":
        if not layers or len(parts) != 1:
            raise LocatorError("|absent names one layer type of a net: FILE:TYPE|absent")
        named = [lay for lay in layers if parts[0] in _layer_field(lay, "type")]
        if named:
            raise LocatorError(f"the net has {len(named)} layer(s) of type {parts[0]!r} "
                               f"({', '.join(sorted(v for lay in named for v in _layer_field(lay, 'name')))}): "
                               "it is not absent")
        if not any(parts[0] in _layers_of(parse_prototxt(p.read_text(encoding="utf-8")), "type") for p in others):
            raise LocatorError(f"no reference prototxt has a layer of type {parts[0]!r}: a misspelt type?")
        return None
    layer_type = None
    if layers:  # a net: the first part names a layer
        named = [lay for lay in layers if ("name", parts[0]) in lay]
        if not named:
            raise LocatorError(f"the net has no layer {parts[0]!r}")
        node, parts = named[0], parts[1:]
        layer_type = next(iter(_layer_field(node, "type")), None)
    fields = [re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part) for part in parts]
    if not parts or not all(fields):
        raise LocatorError(f"{'.'.join(parts)!r} is not a field path (field, field[i], ...)")
    default = None
    if suffix == "default":
        path = ".".join(m.group(1) for m in fields)
        if path not in CAFFE_DEFAULTS:
            raise LocatorError(f"|default: Caffe's default of {path!r} is not known here ({sorted(CAFFE_DEFAULTS)})")
        default = CAFFE_DEFAULTS[path]
        if layer_type not in default.layer_types:
            raise LocatorError(f"|default: the layer is a {layer_type}, and {path!r} is a field of "
                               f"{' / '.join(default.layer_types)} layers ({default.proto})")
    for i, (part, m) in enumerate(zip(parts, fields)):
        if isinstance(node, dict):  # inside a param_str
            if part not in node:
                raise LocatorError(f"no key {part!r} in param_str {node!r}")
            node = node[part]
            continue
        field, index = m.group(1), int(m.group(2) or 0)
        values = [v for k, v in node if k == field]
        if index >= len(values):
            last, indexed = i == len(parts) - 1, m.group(2) is not None
            if default is not None and (last or not indexed):  # the field, or the optional message holding it,
                return default.value                            # is omitted: Caffe's default
            raise LocatorError(f"no field {part!r} (the layer has {len(values)} {field!r})" if indexed else
                               f"no field {part!r} (a field the source omits is cited with |default)")
        node = values[index]
        if field == "param_str":
            node = yaml.safe_load(node.replace("!!python/tuple", ""))
    if suffix == "default":
        raise LocatorError(f"|default, but the source sets it ({node!r}): cite it without |default")
    return node


# ---- numbers in quoted words --------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.\-])(\d+(?:\.\d+)?)(k)?(?!\w|\.\d)")


def numbers_in(words: str) -> list[int | float]:
    """The numbers of a quote in order: `240k` -> 240000, `0.001` -> 0.001; none from names (conv3_1, VGG-16)."""
    out = []
    for digits, thousands in _NUMBER.findall(words):
        value = float(digits) if "." in digits else int(digits)
        out.append(value * 1000 if thousands else value)
    return out


def _quoted(locator: str, words: str, pick: str | None, text: str):
    found = " ".join(words.split()) in " ".join(text.split())
    if pick is None:
        return found
    if not found:
        raise LocatorError(f"{locator!r}: the quoted words are not in the file")
    numbers = numbers_in(words)
    picked = [int(i) for i in pick.split("+")]
    if max(picked) >= len(numbers):
        raise LocatorError(f"{locator!r}: the quote holds {len(numbers)} numbers {numbers}, no [{max(picked)}]")
    values = [numbers[i] for i in picked]
    total = sum(values)
    return round(total, 10) if isinstance(total, float) else total


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


def split_quote(selector: str) -> tuple[str, str | None] | None:
    """("words", "i+j" or None) of a quoted selector `"words"` / `"words"[i+j]`, or None when it is not one."""
    m = re.fullmatch(r'"(.+)"(?:\[(\d+(?:\+\d+)*)\])?', selector, re.S)
    return (m.group(1), m.group(2)) if m else None


def read_value(locator: str, root: Path = REFERENCE):
    """The value at `locator` in the reference material under `root`; for a quote without [i], True when the
    quoted words are there."""
    name, sep, selector = locator.partition(":")
    if not sep or not selector:
        raise LocatorError(f"{locator!r}: a locator is FILE:SELECTOR")
    quote = split_quote(selector)
    suffix = None
    if quote is None and "|" in selector:
        selector, _, suffix = selector.rpartition("|")
        if suffix not in SUFFIXES:
            raise LocatorError(f"{locator!r}: unknown suffix |{suffix} (known: {', '.join(SUFFIXES)})")
    if name == "PAPER.md":
        if quote is None:
            raise LocatorError(f"{locator!r}: PAPER.md locators quote the words, PAPER.md:\"...\"")
        return _quoted(locator, *quote, (root / "PAPER.md").read_text(encoding="utf-8"))
    if name == "d2":
        from detectron2.config import get_cfg

        if suffix:
            raise LocatorError(f"{locator!r}: |{suffix} is for prototxt locators")
        node = get_cfg()
        for part in selector.split("."):
            if part not in node:
                raise LocatorError(f"{locator!r}: Detectron2's config has no {part!r}")
            node = node[part]
        return node
    if name.startswith("prototxt/"):  # MSRA's released ResNet prototxts beside py-faster-rcnn
        path = root / name
    else:
        try:
            path = resolve_file(root / "py-faster-rcnn", name)
        except LocatorError as err:
            raise LocatorError(f"{locator!r}: {err}") from None
    if not path.is_file():
        raise LocatorError(f"{locator!r}: {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if quote is not None:  # quoted code: it occurs in the file (or one of its numbers)
        return _quoted(locator, *quote, text)
    if suffix and path.suffix != ".prototxt":
        raise LocatorError(f"{locator!r}: |{suffix} is for prototxt locators")
    try:
        if path.suffix == ".prototxt":
            others = [p for p in sorted(root.rglob("*.prototxt")) if p != path]
            return _prototxt_value(parse_prototxt(text), selector, suffix, others)
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
        raise LocatorError(f"{locator!r} ({path.relative_to(root)}): {err}") from None
    if value is _ABSENT:
        raise LocatorError(f"{locator!r}: not found in {path.relative_to(root)}")
    return value
