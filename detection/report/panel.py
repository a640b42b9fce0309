"""The qualitative panel: a few val images, ground truth beside each detector's boxes (people look at detections
before tables).

Ground truth comes from the evaluated dataset's COCO json (recorded in the run's evaluation.json), detections from
the run's `inference/<dataset>/coco_instances_results.json` (what COCOEvaluator scored), so the picture shows
exactly what the numbers were computed from.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from backbones.bounded_read import MiB, read_json
from backbones.checkpoint_io import atomic_write
from classification.data.images import ImageReadError, check_image_file

__all__ = ["draw_panel", "panel_font", "SCORE_THRESHOLD", "GT_COLOUR", "DET_COLOUR", "CELL_SIZE", "HEADER",
           "MAX_COLUMNS"]

SCORE_THRESHOLD = 0.5  # detections drawn: score >= this, and at least the top N (N = ground-truth objects)
MAX_BOXES = 10  # at most this many per image
GT_COLOUR = (0, 130, 0)  # dark enough for white label text on it
DET_COLOUR = (200, 0, 0)
FONT_SIZE = 12  # labels and titles at 100 %: DejaVu Sans 12 px, white on the box's colour
LABEL_PAD = 1
HEADER = 22  # the column titles' strip
CELL_SIZE = 240  # the longer side of every cell, in pixels: small images are enlarged, large ones shrunk; ground
#                 truth and four detectors (the demo) fit a 1280-px window at 100 %
PANEL_JSON_LIMIT = 2048 * MiB  # the ground truth (COCO train2017: 448 MB) and a detector's predictions
MAX_COLUMNS = 8  # detectors drawn beside the ground truth (the report says when it shows fewer than it has)


def _boxes_by_image(items: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = defaultdict(list)
    for a in items:
        out[a["image_id"]].append(a)
    return out


def _shown(detections: list[dict], num_gt: int) -> list[dict]:
    """What a reader should see of one image's detections: the confident ones, and at least as many of the best
    as there are objects (a weakly trained detector's scores are low; its best boxes still show what it found)."""
    ranked = sorted(detections, key=lambda d: -d["score"])
    top = max(1, num_gt)
    return [d for i, d in enumerate(ranked) if i < top or d["score"] >= SCORE_THRESHOLD][:MAX_BOXES]


def _read_cell_image(path: Path) -> tuple[Image.Image, float]:
    """The image at cell size (longer side CELL_SIZE; a larger one is never decoded in full where the format
    allows: JPEG draft mode) and the scale from its original pixels (the boxes' coordinates) to the cell's."""
    check_image_file(path)  # a FIFO named by the ground truth blocked the report
    with Image.open(path) as f:
        width, height = f.size
        target = CELL_SIZE / max(width, height)
        if target < 1:
            f.draft("RGB", (round(width * target), round(height * target)))  # JPEG: decode at 1/2 .. 1/8
        image = f.convert("RGB")
    size = (max(1, round(width * target)), max(1, round(height * target)))
    return image.resize(size, Image.BILINEAR), target


def panel_font(size: int = FONT_SIZE) -> ImageFont.FreeTypeFont:
    """DejaVu Sans, the font matplotlib ships (so every environment that draws the plots has it): PIL's default
    bitmap font was a few pixels high."""
    from matplotlib import font_manager

    return ImageFont.truetype(font_manager.findfont("DejaVu Sans", fallback_to_default=True), size)


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _label_box(draw: ImageDraw.ImageDraw, text: str, box, placed: list, size: tuple[int, int], font):
    """Where a box's label goes: a filled strip just above the box (inside its top edge when the image ends
    there), moved down one strip at a time past labels already placed, kept inside the cell."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    w, h = right - left + 2 * LABEL_PAD, bottom - top + 2 * LABEL_PAD
    x = min(max(0, box[0]), max(0, size[0] - w))
    y = box[1] - h if box[1] - h >= 0 else box[1]
    for _ in range(len(placed) + 1):
        rect = (x, y, x + w, y + h)
        if not any(_overlaps(rect, other) for other in placed):
            break
        y = min(y + h, size[1] - h)
    return (x, y, x + w, y + h), (x + LABEL_PAD - left, y + LABEL_PAD - top)


def _draw_cell(image: Image.Image, scale: float, boxes: list[dict], names: dict[int, str], colour,
               font) -> Image.Image:
    """One image's boxes and their labels (category, and the score of a detection) in white on the box's colour:
    legible on any background, none drawn over another."""
    cell = image.copy()  # already at cell size (_read_cell_image); `scale` maps the boxes onto it
    draw = ImageDraw.Draw(cell)
    boxes = sorted(boxes, key=lambda b: -b.get("score", 1.0))  # the best detection's label placed first
    corners = [tuple(v * scale for v in (b["bbox"][0], b["bbox"][1], b["bbox"][0] + b["bbox"][2],
                                          b["bbox"][1] + b["bbox"][3])) for b in boxes]
    for corner in corners:
        draw.rectangle(corner, outline=colour, width=2)
    placed: list = []
    for b, corner in zip(boxes, corners):
        label = names.get(b["category_id"], str(b["category_id"])) + (f" {b['score']:.2f}" if "score" in b else "")
        rect, at = _label_box(draw, label, corner, placed, cell.size, font)
        placed.append(rect)
        draw.rectangle(rect, fill=colour)
        draw.text(at, label, fill=(255, 255, 255), font=font)
    return cell


def draw_panel(columns: list[tuple[str, Path]], gt_json: Path, image_root: Path, out_file: Path, *,
               num_images: int = 4) -> tuple[Path, list[int]]:
    """Draw `num_images` images (the first ones of `gt_json`) as rows: ground truth, then one cell per
    (title, predictions file) column. Returns (the PNG, the image ids drawn)."""
    gt = read_json(gt_json, limit=PANEL_JSON_LIMIT)
    names = {c["id"]: c["name"] for c in gt.get("categories", [])}
    images = sorted(gt.get("images", []), key=lambda im: im["id"])[:num_images]
    if not images:
        raise ValueError(f"{gt_json}: no images to draw")
    gt_boxes = _boxes_by_image(gt.get("annotations", []))
    dets = []
    for title, path in columns:
        by_image = _boxes_by_image(read_json(path, limit=PANEL_JSON_LIMIT))
        dets.append((title, {k: _shown(v, len(gt_boxes.get(k, []))) for k, v in by_image.items()}))
    font = panel_font()
    rows, drawn, skipped = [], [], []
    for im in images:
        try:
            image, scale = _read_cell_image(Path(image_root) / im["file_name"])
        except (OSError, ValueError, Image.DecompressionBombError, ImageReadError) as err:  # its row only
            skipped.append(f"{im['file_name']} ({err})")
            continue
        drawn.append(im)
        cells = [_draw_cell(image, scale, gt_boxes.get(im["id"], []), names, GT_COLOUR, font)]
        cells += [_draw_cell(image, scale, by_image.get(im["id"], []), names, DET_COLOUR, font)
                  for _, by_image in dets]
        rows.append(cells)
    if not rows:
        raise ValueError(f"no image of {gt_json} could be drawn: {'; '.join(skipped)}")
    cw = max(c.width for cells in rows for c in cells)
    ch = max(c.height for cells in rows for c in cells)
    titles = ["ground truth"] + [t for t, _ in dets]
    canvas = Image.new("RGB", (cw * len(titles), HEADER + ch * len(rows)), "white")
    draw = ImageDraw.Draw(canvas)
    title_font = panel_font(FONT_SIZE + 1)
    for j, t in enumerate(titles):
        while len(t) > 4 and draw.textlength(t, font=title_font) > cw - 8:  # a long run name: cut, not overdrawn
            t = t[:-2] + "…"
        draw.text((j * cw + 4, 3), t, fill=(0, 0, 0), font=title_font)
    for i, cells in enumerate(rows):
        for j, cell in enumerate(cells):
            canvas.paste(cell, (j * cw, HEADER + i * ch))  # images of other sizes: top-left aligned
    out_file = Path(out_file)
    atomic_write(out_file, lambda f: canvas.save(f, format="PNG"))  # whole or not at all; a full disk named
    return out_file, [im["id"] for im in drawn]
