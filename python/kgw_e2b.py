"""The kernel side of kgw's E2B-compatible API (docs/e2b.md): what E2B's code interpreter adds
to a displayed object's MIME bundle, for the gateway's /execute to give as a result's `chart`
and `data`.

    import kgw_e2b
    kgw_e2b.install()       # what an E2B sandbox's set-up runs (gateway/e2bsbx.c)
    kgw_e2b.chart(fig)      # a matplotlib figure's data as a dict, or None
    kgw_e2b.frame_data(df)  # a DataFrame's columns: (dict, None or what was left out)

install() registers IPython display formatters for three MIME types:

- "e2b/chart" (a result's `chart`): a matplotlib Figure's type ("line", "scatter", "bar",
  "pie", "box_and_whisker", "superchart" for a figure of several axes, "unknown"), titles,
  axis labels and units, ticks, scales and elements. A figure without data gives none.
- "e2b/data" (a result's `data`): a pandas DataFrame as {column: [values]}, values made JSON
  (timestamps in ISO 8601, NaN and NaT as null).
- "kgw/truncated" (an unknown key: the JavaScript SDK's `extra`): when `data` was cut to
  the limits below, {"data": {"rows", "total_rows", "columns", "total_columns"}}.

An object with a `_repr_e2b_chart_` or `_repr_e2b_data_` method gives its own, as in E2B.

Sizes are bounded, whatever the figure or the frame: a chart has at most MAX_AXES sub-charts,
MAX_ELEMENTS elements (lines, bars, wedges, boxes) and MAX_POINTS points (shared evenly among
its lines and scatters; a longer series is sampled evenly, first and last points kept), at
most MAX_TICKS ticks per axis and MAX_TEXT characters per string. A chart that was cut says so
with "truncated": true; a sampled element has "total_points", a chart whose elements were
left out "total_elements". `data` holds at most DATA_MAX_COLUMNS columns and, of its first
rows, as many as fit DATA_MAX_CELLS values and DATA_MAX_BYTES of JSON.

Only the kernels of E2B sandboxes import this: other kernels' display data is Jupyter's own.
Standard library only at import; matplotlib, numpy and pandas are used only once the code run
in the kernel has imported them.
"""
import datetime
import json
import math
import numbers
import re
import sys

__all__ = ["install", "chart", "frame_data"]

CHART_MIME, DATA_MIME, NOTE_MIME = "e2b/chart", "e2b/data", "kgw/truncated"

MAX_AXES = 32
MAX_ELEMENTS = 256
MAX_POINTS = 10000
MAX_TICKS = 100
MAX_TEXT = 1000
DATA_MAX_COLUMNS = 1000
DATA_MAX_CELLS = 100000
DATA_MAX_BYTES = 4 * 1024 * 1024

_UNIT = re.compile(r"\s\(([^()]*)\)|\[([^\[\]]*)\]")  # "Time (s)", "Distance [km]"
_DEFAULT_LABEL = re.compile(r"_(child|container)(\d+)$")  # matplotlib's unnamed artists


# ---- values ----


def _text(s):
    """A title or label: None when empty, at most MAX_TEXT characters."""
    s = "" if s is None else str(s)
    return s[:MAX_TEXT] or None


def _label(s):
    """An element's label: always a string."""
    return ("" if s is None else str(s))[:MAX_TEXT]


def _unit(label):
    """The unit a label names in parentheses or brackets: "Time (s)" is "s"."""
    m = _UNIT.search(label) if label else None
    return (m.group(1) or m.group(2) or None) if m else None


def _missing(v):
    return type(v).__name__ in ("NaTType", "NAType") or (
        type(v).__name__ == "datetime64" and str(v) == "NaT")


def _tidy(v):
    """A float without the noise of its arithmetic (12 significant digits)."""
    f = float(v)
    return float("%.12g" % f) if math.isfinite(f) else None


def _point(v):
    """One coordinate: a number, an ISO 8601 string for a date, or a category's name."""
    if v is None or _missing(v):
        return None
    if isinstance(v, (datetime.date, datetime.time)):  # datetime and pandas' Timestamp too
        return v.isoformat()
    if type(v).__name__ == "datetime64":
        return str(v.astype("datetime64[s]"))
    if isinstance(v, numbers.Real):
        f = float(v)
        return f if math.isfinite(f) else None
    return _label(v)


def _cell(v, depth=0):
    """A DataFrame's value as JSON: numbers, strings, booleans, null, ISO 8601 dates."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if _missing(v):
        return None
    if type(v).__name__ == "datetime64":
        return _point(v)
    if hasattr(v, "item") and type(v).__module__ == "numpy":  # a numpy scalar
        v = v.item()
        if isinstance(v, (bool, str)):
            return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)) and depth < 4:
        return [_cell(x, depth + 1) for x in v]
    if isinstance(v, dict) and depth < 4:
        return {str(k): _cell(x, depth + 1) for k, x in v.items()}
    return str(v)


def _spread(n, k):
    """k indices of range(n), evenly spread, the first and the last among them."""
    if k >= n:
        return range(n)
    if k < 2:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


# ---- the limits of one figure ----


class _Budget:
    """What a figure's chart may still hold; cut records that something was left out."""

    def __init__(self, point_series):
        self.elements = MAX_ELEMENTS
        self.share = max(2, MAX_POINTS // max(1, min(point_series, MAX_ELEMENTS)))
        self.cut = False

    def take(self):
        """One more element, if there is room for it."""
        if self.elements <= 0:
            self.cut = True
            return False
        self.elements -= 1
        return True


def _elements(chart, items, budget):
    """Sets chart's elements: the items there is room for (items: (element builder, ...))."""
    els, total = [], 0
    for build in items:
        total += 1
        if budget.take():
            els.append(build())
    chart["elements"] = els
    if len(els) < total:
        chart["total_elements"] = total
    return chart


# ---- axes ----


def _converter(axis):
    get = getattr(axis, "get_converter", None)  # matplotlib >= 3.10
    return get() if get else getattr(axis, "converter", None)


def _is_dates(axis):
    conv = _converter(axis)
    if conv is not None and "Date" in type(conv).__name__:  # matplotlib's, pandas' converters
        return True
    return type(axis.get_major_formatter()).__name__ in (
        "AutoDateFormatter", "ConciseDateFormatter", "DateFormatter")


def _by_hand(axis):
    """Whether the axis's ticks were put and named by hand (set_xticks(ticks, labels),
    boxplot's labels)."""
    return (type(axis.get_major_locator()).__name__ == "FixedLocator" or
            type(axis.get_major_formatter()).__name__ == "FixedFormatter")


def _is_categories(axis, locs, labels):
    if type(_converter(axis)).__name__ == "StrCategoryConverter":
        return True
    # ticks at 0, 1, ... named by hand (set_xticks(range(n), names))
    if not _by_hand(axis) or not locs:
        return False
    return all(loc == i for i, loc in enumerate(locs)) and any(
        lab != str(i) for i, lab in enumerate(labels))


def _axis(axis, budget):
    """(ticks, tick labels, scale) of an axis."""
    locs = list(axis.get_ticklocs())
    labels = [_label(t.get_text()) for t in axis.get_ticklabels()]
    if len(locs) > MAX_TICKS or len(labels) > MAX_TICKS:
        budget.cut = True
        locs, labels = locs[:MAX_TICKS], labels[:MAX_TICKS]
    if _is_dates(axis):
        return [_date(t) for t in locs], labels, "datetime"
    ticks = [_point(t) for t in locs]
    scale = axis.get_scale()
    if scale == "linear" and _is_categories(axis, locs, labels):
        scale = "categorical"
    return ticks, labels, scale


def _base(kind, ax):
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    return {"type": kind, "title": _text(title), "elements": []}


def _planar(kind, ax, swap=False):
    """A chart with two axes: labels and their units (swapped for horizontal bars, boxes)."""
    c = _base(kind, ax)
    x, y = _text(ax.get_xlabel()), _text(ax.get_ylabel())
    if swap:
        x, y = y, x
    c.update(x_label=x, y_label=y, x_unit=_unit(x), y_unit=_unit(y))
    return c


def _artists(ax):
    """What was drawn on ax, texts aside."""
    from matplotlib.text import Text

    kids = getattr(ax, "_children", None)
    if kids is None:
        kids = [*ax.lines, *ax.patches, *ax.collections, *ax.images, *ax.artists, *ax.tables]
    return [a for a in kids if not isinstance(a, Text)]


def _is_rule(line):
    """A straight line along an axis (axhline, axvline, a grid line): not data."""
    try:
        x, y = line.get_xdata(), line.get_ydata()
        return len(x) == 2 and len(y) == 2 and bool(x[0] == x[1] or y[0] == y[1])
    except (TypeError, ValueError):
        return False


def _kind(arts):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge

    if not arts:
        return "unknown"
    if all(isinstance(a, Line2D) for a in arts):
        return "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in arts):
        return "box_and_whisker"
    arts = [a for a in arts if not (isinstance(a, Line2D) and _is_rule(a))]
    for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if arts and all(isinstance(a, cls) for a in arts):
            return kind
    return "unknown"


def _series(label, xs, ys, budget, x_dates=False):
    """A line's or a scatter's element: its points, sampled to the budget's share."""
    n = min(len(xs), len(ys))
    idx = _spread(n, budget.share)
    x_of = _date if x_dates else _point
    el = {"label": _label(label), "points": [[x_of(xs[i]), _point(ys[i])] for i in idx]}
    if len(idx) < n:
        budget.cut = True
        el["total_points"] = n
    return el


def _unnamed(label, word):
    m = _DEFAULT_LABEL.match(label or "")
    return "%s %s" % (word, m.group(2)) if m else label


def _data(seq):
    import numpy

    # a sequence as it is (a list of numbers and strings, say) rather than as strings all
    return numpy.ma.getdata(numpy.asanyarray(seq, dtype=None if hasattr(seq, "dtype") else object))


def _point_chart(kind, ax, budget):
    c = _planar(kind, ax)
    for a, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
        ticks, labels, scale = _axis(a, budget)
        c.update({name + "_ticks": ticks, name + "_tick_labels": labels, name + "_scale": scale})
    if kind == "line":
        lines = [ln for ln in ax.get_lines() if not _is_rule(ln)]
        items = [lambda ln=ln: _series(_unnamed(ln.get_label(), "Line"),
                                       _data(ln.get_xdata()), _data(ln.get_ydata()), budget)
                 for ln in lines]
    else:
        dates = c["x_scale"] == "datetime"

        def scatter(coll):
            off = _data(coll.get_offsets())
            off = off.reshape(-1, 2) if off.size else off.reshape(0, 2)
            return _series(coll.get_label(), off[:, 0], off[:, 1], budget, dates)

        items = [lambda coll=coll: scatter(coll) for coll in ax.collections]
    return _elements(c, items, budget)


def _date(v):
    """A number on a date axis as an ISO 8601 string (as it is, if it is no date)."""
    from matplotlib.dates import num2date

    try:
        return num2date(v).isoformat() if isinstance(v, numbers.Real) else _point(v)
    except (ValueError, OverflowError):
        return _point(v)


def _namer(axis):
    """What names the bar or box at a position of axis, given half its width: its category,
    the tick put by hand at it, its date, else the number."""
    import numpy

    conv = _converter(axis)
    cats = {}
    if type(conv).__name__ == "StrCategoryConverter" and getattr(axis, "units", None):
        cats = {i: name for name, i in getattr(axis.units, "_mapping", {}).items()}
    locs, texts = numpy.zeros(0), []
    if _by_hand(axis):  # (the formatter's texts: no tick artists made for thousands of ticks)
        locs = numpy.asarray(axis.get_ticklocs(), dtype=float)
        texts = [str(t) for t in axis.get_major_formatter().format_ticks(locs)]
    dates = _is_dates(axis)

    def name(pos, half):
        if cats and round(pos) in cats and abs(pos - round(pos)) <= 0.5:
            return _label(cats[round(pos)])
        if locs.size:
            j = int(numpy.argmin(numpy.abs(locs - pos)))
            if abs(locs[j] - pos) <= half * (1 + 1e-9) + 1e-12 and texts[j]:
                return _label(texts[j])
        return _date(pos) if dates else "%g" % pos

    return name


def _bar_chart(ax, budget):
    from matplotlib.container import BarContainer

    conts = [ct for ct in ax.containers if isinstance(ct, BarContainer)]
    horizontal = False
    for ct in conts[:1]:
        orient = getattr(ct, "orientation", None)
        if orient is None:  # matplotlib < 3.4: barh's bars share their height
            hs = [r.get_height() for r in ct.patches]
            orient = "horizontal" if len(hs) > 1 and all(h == hs[0] for h in hs) else "vertical"
        horizontal = orient == "horizontal"
    c = _planar("bar", ax, swap=horizontal)
    name = _namer(ax.yaxis if horizontal else ax.xaxis)

    def bar(ct, i, group):
        r = ct.patches[i]
        if horizontal:
            pos, size, value = r.get_y() + r.get_height() / 2, r.get_height(), r.get_width()
        else:
            pos, size, value = r.get_x() + r.get_width() / 2, r.get_width(), r.get_height()
        values = getattr(ct, "datavalues", None)
        if values is not None and i < len(values):
            value = values[i]
        return {"label": name(pos, abs(size) / 2), "group": group,
                "value": _point(value)}

    items = []
    for ct in conts:
        group = _label(_unnamed(ct.get_label(), "Group"))
        items += [lambda ct=ct, i=i, g=group: bar(ct, i, g) for i in range(len(ct.patches))]
    return _elements(c, items, budget)


def _pie_chart(ax, budget):
    def wedge(w):
        return {"label": _label(w.get_label()), "angle": round(abs(w.theta2 - w.theta1), 4),
                "radius": _tidy(w.r)}

    return _elements(_base("pie", ax), [lambda w=w: wedge(w) for w in ax.patches], budget)


def _box_chart(ax, budget):
    """Boxes (PathPatch, patch_artist=True) and their lines: whiskers from a box's edge to the
    extremes, a median across it, fliers (markers only) beyond."""
    import numpy
    from matplotlib.lines import Line2D

    lines = [ln for ln in ax.lines if isinstance(ln, Line2D)]
    segs = [(numpy.asarray(_data(ln.get_xdata()), dtype=float),
             numpy.asarray(_data(ln.get_ydata()), dtype=float)) for ln in lines]

    def near(a, b):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)), abs(float(b)))

    def medians(i, j):  # lines across one of the first boxes along coordinate i, constant in j
        return sum(1 for patch in ax.patches[:8] for s in segs
                   if len(s[i]) == 2 and s[j][0] == s[j][1] and
                   near(min(s[i]), min(patch.get_path().vertices[:, i])) and
                   near(max(s[i]), max(patch.get_path().vertices[:, i])))

    vertical = medians(0, 1) >= medians(1, 0)  # upright boxes: medians lie along x
    c = _planar("box_and_whisker", ax, swap=not vertical)
    name = _namer(ax.xaxis if vertical else ax.yaxis)
    k = 0 if vertical else 1  # each line's extent across the boxes, to find a box's lines
    pmin = numpy.array([s[k].min() if s[k].size else numpy.inf for s in segs])
    pmax = numpy.array([s[k].max() if s[k].size else -numpy.inf for s in segs])

    def box(patch):
        v = patch.get_path().vertices
        pos, val = (v[:, 0], v[:, 1]) if vertical else (v[:, 1], v[:, 0])
        lo, hi, q1, q3 = float(min(pos)), float(max(pos)), float(min(val)), float(max(val))
        eps = 1e-9 * max(1.0, abs(lo), abs(hi))
        veps = 1e-9 * max(1.0, abs(q1), abs(q3))
        el = {"label": name((lo + hi) / 2, (hi - lo) / 2), "min": _tidy(q1),
              "first_quartile": _tidy(q1), "median": None, "third_quartile": _tidy(q3),
              "max": _tidy(q3), "outliers": []}
        outliers = []
        for j in numpy.nonzero((pmin >= lo - eps) & (pmax <= hi + eps))[0]:
            ln, (x, y) = lines[j], segs[j]
            p, w = (x, y) if vertical else (y, x)
            if ln.get_linestyle() in ("None", "none", "", " "):
                outliers += w.tolist()
            elif len(p) == 2 and w[0] == w[1] and near(min(p), lo) and near(max(p), hi):
                el["median"] = _tidy(w[0])
            elif len(p) == 2 and p[0] == p[1]:
                a, b = float(min(w)), float(max(w))
                if b <= q1 + veps:
                    el["min"] = _tidy(a)
                elif a >= q3 - veps:
                    el["max"] = _tidy(b)
        if len(outliers) > budget.share:
            budget.cut = True
            el["total_outliers"] = len(outliers)
            outliers = [outliers[i] for i in _spread(len(outliers), budget.share)]
        el["outliers"] = [_tidy(o) for o in outliers]
        return el

    return _elements(c, [lambda p=p: box(p) for p in ax.patches], budget)


def _axes_chart(ax, budget):
    kind = _kind(_artists(ax))
    try:
        if kind in ("line", "scatter"):
            return _point_chart(kind, ax, budget)
        if kind == "bar":
            return _bar_chart(ax, budget)
        if kind == "pie":
            return _pie_chart(ax, budget)
        if kind == "box_and_whisker":
            return _box_chart(ax, budget)
    except Exception:  # a figure this reading does not follow: its kind is not known
        pass
    return _base("unknown", ax)


def chart(fig):
    """The data of a matplotlib figure as E2B gives it, or None for a figure without data."""
    axes = list(fig.get_axes())
    if not any(ax.has_data() for ax in axes):
        return None
    kept = axes[:MAX_AXES]
    budget = _Budget(sum(len(ax.lines) + len(ax.collections) for ax in kept))
    if len(axes) == 1:
        c = _axes_chart(axes[0], budget)
    else:
        sup = getattr(fig, "_suptitle", None)
        c = {"type": "superchart", "title": _text(sup.get_text() if sup else None),
             "elements": [_axes_chart(ax, budget) for ax in kept]}
        if len(kept) < len(axes):
            budget.cut = True
            c["total_elements"] = len(axes)
    if budget.cut:
        c["truncated"] = True
    return c


# ---- dataframes ----


def frame_data(df):
    """A DataFrame's columns, {name: [values]}, within the limits; and None, or what was cut
    ({"rows", "total_rows", "columns", "total_columns"})."""
    nrows, ncols = df.shape
    cols = min(ncols, DATA_MAX_COLUMNS)
    rows = min(nrows, DATA_MAX_CELLS // max(1, cols))
    while True:
        out = {}
        for j in range(cols):
            out[str(df.columns[j])] = [_cell(v) for v in df.iloc[:rows, j].tolist()]
        size = len(json.dumps(out))
        if size <= DATA_MAX_BYTES or rows == 0:
            break
        rows = min(rows - 1, int(rows * DATA_MAX_BYTES / size * 0.9))
    if (rows, cols) == (nrows, ncols):
        return out, None
    return out, {"rows": rows, "total_rows": nrows, "columns": cols, "total_columns": ncols}


# ---- IPython ----


def _figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return obj if mod is not None and isinstance(obj, mod.Figure) else None


def _frame(obj):
    pandas = sys.modules.get("pandas")
    return obj if pandas is not None and isinstance(obj, pandas.DataFrame) else None


def install(ip=None):
    """Registers the formatters with the running IPython (or ip): True, or False outside
    IPython. Running it again replaces them."""
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = ip or get_ipython()
    if ip is None:
        return False
    pending = {}  # what frame_data left out, for the note formatter that runs next

    class ChartFormatter(BaseFormatter):
        format_type = Unicode(CHART_MIME)
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict, str)

        def __call__(self, obj):
            fig = _figure(obj)
            if fig is None:
                return super().__call__(obj)
            try:
                return chart(fig)
            except Exception:
                return None

    class DataFormatter(BaseFormatter):
        format_type = Unicode(DATA_MIME)
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pending.clear()
            if _frame(obj) is None:
                return super().__call__(obj)
            try:
                data, note = frame_data(obj)
            except Exception:
                return None
            if note:
                pending[id(obj)] = note
            return data

    class NoteFormatter(BaseFormatter):
        format_type = Unicode(NOTE_MIME)
        _return_type = (dict,)

        def __call__(self, obj):
            note = pending.pop(id(obj), None)
            return {"data": note} if note else None

    fmt = ip.display_formatter
    # in this order (a dict's): the note formatter reads what the data formatter left
    for mime, cls in ((CHART_MIME, ChartFormatter), (DATA_MIME, DataFormatter),
                      (NOTE_MIME, NoteFormatter)):
        fmt.formatters.pop(mime, None)
        fmt.formatters[mime] = cls(parent=fmt)
    return True
