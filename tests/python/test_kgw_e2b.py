"""The E2B charts and dataframes of python/kgw_e2b.py, without a kernel: matplotlib figures (the
Agg backend) read as E2B's code interpreter gives them (line, scatter, bar, horizontal bar, pie,
box-and-whisker, superchart, unknown, a blank figure), what the limits cut and that the chart
says so, a DataFrame's columns as JSON with their limits, and the formatters registered on a
real IPython shell. Run by meson (the unit test kgw_e2b) with python/ on PYTHONPATH; skipped
(77) without Debian's python3-matplotlib and python3-pandas."""
import datetime
import json
import math
import os
import sys
import tempfile
import unittest

try:
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
except ImportError as e:  # scripts/deps.sh --test installs them
    print("skipped: %s" % e)
    sys.exit(77)

import kgw_e2b


def roundtrip(c):
    """What the gateway relays: the chart as JSON, strict (no NaN)."""
    return json.loads(json.dumps(c, allow_nan=False))


class Charts(unittest.TestCase):
    def tearDown(self):
        plt.close("all")

    def test_a_line_chart_with_dates_units_and_scales(self):
        dates = [datetime.date(2023, 9, 1) + datetime.timedelta(days=i) for i in range(50)]
        x = np.linspace(0, 2 * np.pi, 50)
        plt.figure()
        plt.plot(dates, np.sin(x), label="sin(x)")
        plt.plot(dates, np.cos(x))
        plt.axhline(0.5)  # a rule, not data
        plt.xlabel("Time (s)")
        plt.ylabel("Amplitude [Hz]")
        plt.title("Waves")
        c = roundtrip(kgw_e2b.chart(plt.gcf()))
        self.assertEqual(c["type"], "line")
        self.assertEqual((c["title"], c["x_label"], c["y_label"]),
                         ("Waves", "Time (s)", "Amplitude [Hz]"))
        self.assertEqual((c["x_unit"], c["y_unit"]), ("s", "Hz"))
        self.assertEqual((c["x_scale"], c["y_scale"]), ("datetime", "linear"))
        self.assertTrue(all(isinstance(t, str) for t in c["x_ticks"]))
        datetime.datetime.fromisoformat(c["x_ticks"][0])
        self.assertTrue(all(isinstance(t, float) for t in c["y_ticks"]))
        self.assertEqual(len(c["x_tick_labels"]), len(c["x_ticks"]))
        self.assertEqual([e["label"] for e in c["elements"]], ["sin(x)", "Line 1"])
        first = c["elements"][0]["points"]
        self.assertEqual(len(first), 50)
        self.assertEqual(first[0][0], "2023-09-01")
        self.assertEqual(first[3][0], "2023-09-04")
        self.assertAlmostEqual(first[10][1], math.sin(x[10]))
        self.assertNotIn("truncated", c)

    def test_log_and_categorical_scales(self):
        plt.figure()
        plt.plot(np.linspace(1, 10, 10), np.exp(np.linspace(1, 10, 10)))
        plt.yscale("log")
        c = kgw_e2b.chart(plt.gcf())
        self.assertEqual((c["x_scale"], c["y_scale"]), ("linear", "log"))
        plt.figure()
        plt.plot([1, 2, 3], ["A", "B", "C"])
        c = roundtrip(kgw_e2b.chart(plt.gcf()))
        self.assertEqual((c["x_scale"], c["y_scale"]), ("linear", "categorical"))
        self.assertEqual(c["elements"][0]["points"], [[1.0, "A"], [2.0, "B"], [3.0, "C"]])

    def test_scatter(self):
        plt.figure()
        plt.scatter([1, 2, 3], [4, 5, 6], label="one")
        plt.scatter(np.arange(10), np.arange(10) * 2.0, label="two")
        plt.xlabel("A")
        c = roundtrip(kgw_e2b.chart(plt.gcf()))
        self.assertEqual(c["type"], "scatter")
        self.assertIsNone(c["title"])
        self.assertEqual((c["x_label"], c["y_label"]), ("A", None))
        self.assertEqual([e["label"] for e in c["elements"]], ["one", "two"])
        self.assertEqual(c["elements"][0]["points"], [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]])
        self.assertEqual(len(c["elements"][1]["points"]), 10)

    def test_bars_vertical_grouped_and_horizontal(self):
        plt.figure()
        plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
        plt.xlabel("Authors")
        plt.ylabel("Number of Books Sold")
        plt.title("Sales")
        c = roundtrip(kgw_e2b.chart(plt.gcf()))
        self.assertEqual(c["type"], "bar")
        self.assertEqual((c["x_label"], c["y_label"], c["x_unit"]),
                         ("Authors", "Number of Books Sold", None))
        self.assertEqual([(e["label"], e["group"], e["value"]) for e in c["elements"]],
                         [("Author A", "Books Sold", 100), ("Author B", "Books Sold", 200),
                          ("Author C", "Books Sold", 300)])
        # two groups side by side, labelled by ticks between them; unnamed groups
        fig, ax = plt.subplots()
        pos = np.arange(2)
        ax.bar(pos - 0.2, [1, 2], 0.4)
        ax.bar(pos + 0.2, [3, -4], 0.4)
        ax.set_xticks(pos, ["x", "y"])
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual([(e["label"], e["group"], e["value"]) for e in c["elements"]],
                         [("x", "Group 0", 1), ("y", "Group 0", 2), ("x", "Group 1", 3),
                          ("y", "Group 1", -4)])
        # numbers where no tick names a bar; barh: the category axis is the chart's x
        fig, ax = plt.subplots()
        ax.barh([0, 1, 2, 3, 4, 5, 6], [5, 6, 7, 8, 9, 10, 11])
        ax.set_ylabel("Kind")
        ax.set_xlabel("Count (n)")
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual((c["x_label"], c["y_label"], c["y_unit"]), ("Kind", "Count (n)", "n"))
        self.assertEqual([e["value"] for e in c["elements"]], [5, 6, 7, 8, 9, 10, 11])
        self.assertEqual([e["label"] for e in c["elements"]], [str(i) for i in range(7)])
        # bars over dates: named by their dates; a histogram's by their centres
        fig, ax = plt.subplots()
        ax.bar([datetime.date(2024, 5, 1), datetime.date(2024, 5, 2)], [3, 4])
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual([e["label"][:10] for e in c["elements"]], ["2024-05-01", "2024-05-02"])
        fig, ax = plt.subplots()
        ax.hist([0.5, 1.5, 1.6, 2.5], bins=[0, 1, 2, 3])
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual([(e["label"], e["value"]) for e in c["elements"]],
                         [("0.5", 1), ("1.5", 2), ("2.5", 1)])

    def test_pie(self):
        fig, ax = plt.subplots()
        plt.xlabel("x")
        ax.pie([90, 10], labels=["No", "No, in blue"], autopct="%1.1f%%", startangle=90)
        plt.title("Pie")
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual(c, {"type": "pie", "title": "Pie", "elements": [
            {"label": "No", "angle": 324, "radius": 1},
            {"label": "No, in blue", "angle": 36, "radius": 1}]})

    def test_box_and_whisker_both_ways(self):
        data = {"Class A": [85, 90, 78, 92, 88], "Class B": [95, 89, 76, 91, 84, 87],
                "Class C": [75, 82, 88, 79, 86]}
        for vert in (True, False):
            fig, ax = plt.subplots()
            ax.set_title("Scores")
            ax.set_xlabel("Class" if vert else "Score")
            ax.set_ylabel("Score" if vert else "Class")
            ax.boxplot(list(data.values()), labels=list(data.keys()), patch_artist=True,
                       vert=vert)
            c = roundtrip(kgw_e2b.chart(fig))
            self.assertEqual(c["type"], "box_and_whisker", vert)
            self.assertEqual((c["x_label"], c["y_label"]), ("Class", "Score"), vert)
            els = c["elements"]
            self.assertEqual([e["label"] for e in els], list(data), vert)
            self.assertEqual([e["outliers"] for e in els], [[], [76], []], vert)
            self.assertEqual([e["min"] for e in els], [78, 84, 75], vert)
            self.assertEqual([e["first_quartile"] for e in els], [85, 84.75, 79], vert)
            self.assertEqual([e["median"] for e in els], [88, 88, 82], vert)
            self.assertEqual([e["third_quartile"] for e in els], [90, 90.5, 86], vert)
            self.assertEqual([e["max"] for e in els], [92, 95, 88], vert)

    def test_superchart(self):
        fig, axs = plt.subplots(1, 2)
        fig.suptitle("Several")
        axs[0].plot(np.linspace(0, 10, 100), np.sin(np.linspace(0, 10, 100)), "r")
        axs[0].set_title("Sine")
        axs[0].grid(True)
        axs[1].scatter(np.random.rand(5), np.random.rand(5), label="Dataset 1")
        axs[1].set_xlabel("X")
        axs[1].set_title("Scatter")
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual((c["type"], c["title"]), ("superchart", "Several"))
        self.assertEqual([(s["type"], s["title"]) for s in c["elements"]],
                         [("line", "Sine"), ("scatter", "Scatter")])
        self.assertEqual(len(c["elements"][0]["elements"][0]["points"]), 100)
        self.assertEqual(c["elements"][1]["x_label"], "X")
        self.assertEqual(len(c["elements"][1]["elements"][0]["points"]), 5)

    def test_unknown_and_blank(self):
        fig, ax = plt.subplots()
        ax.add_artist(plt.Circle((0, 0), 1, fill=False))
        ax.grid(True)
        plt.title("Circles")
        self.assertEqual(kgw_e2b.chart(fig), {"type": "unknown", "title": "Circles",
                                              "elements": []})
        fig, _ = plt.subplots()
        self.assertIsNone(kgw_e2b.chart(fig))

    def test_a_million_points_are_sampled_and_said_so(self):
        n = 1_000_000
        x = np.arange(n, dtype=float)
        plt.figure()
        plt.plot(x, x * 2, label="big")
        plt.plot([0, 1, 2], [3, 4, 5], label="small")
        c = roundtrip(kgw_e2b.chart(plt.gcf()))
        self.assertTrue(c["truncated"])
        big, small = c["elements"]
        self.assertEqual(big["total_points"], n)
        self.assertEqual(len(big["points"]), kgw_e2b.MAX_POINTS // 2)
        self.assertEqual(big["points"][0], [0.0, 0.0])
        self.assertEqual(big["points"][-1], [n - 1.0, 2 * (n - 1.0)])
        self.assertNotIn("total_points", small)
        self.assertLess(len(json.dumps(c)), 1024 * 1024)

    def test_elements_and_axes_beyond_the_limits_are_left_out(self):
        fig, ax = plt.subplots()
        for i in range(kgw_e2b.MAX_ELEMENTS + 10):
            ax.plot([0, 1, 2], [i, i + 1, i], label="l%d" % i)
        c = kgw_e2b.chart(fig)
        self.assertEqual(len(c["elements"]), kgw_e2b.MAX_ELEMENTS)
        self.assertEqual(c["total_elements"], kgw_e2b.MAX_ELEMENTS + 10)
        self.assertTrue(c["truncated"])
        fig, axs = plt.subplots(1, kgw_e2b.MAX_AXES + 3)
        for a in axs:
            a.plot([1, 2], [3, 4])
        c = kgw_e2b.chart(fig)
        self.assertEqual((len(c["elements"]), c["total_elements"], c["truncated"]),
                         (kgw_e2b.MAX_AXES, kgw_e2b.MAX_AXES + 3, True))
        fig, ax = plt.subplots()
        ax.plot([1, 2], [float("nan"), 1])
        ax.set_title("t" * 5000)
        c = roundtrip(kgw_e2b.chart(fig))
        self.assertEqual(len(c["title"]), kgw_e2b.MAX_TEXT)
        self.assertEqual(c["elements"][0]["points"][0], [1.0, None])


class Data(unittest.TestCase):
    def test_columns_as_json(self):
        df = pd.DataFrame({"a": [1, 2, 3], "b": [1.5, float("nan"), 3.0],
                           "when": pd.to_datetime(["2024-01-02", None, "2024-03-04 05:06:07"]),
                           "s": ["x", None, "z"], 7: [True, False, True]})
        data, note = kgw_e2b.frame_data(df)
        self.assertIsNone(note)
        self.assertEqual(json.loads(json.dumps(data, allow_nan=False)), {
            "a": [1, 2, 3], "b": [1.5, None, 3.0],
            "when": ["2024-01-02T00:00:00", None, "2024-03-04T05:06:07"],
            "s": ["x", None, "z"], "7": [True, False, True]})

    def test_rows_columns_and_bytes_are_capped(self):
        df = pd.DataFrame({"a": np.arange(1_000_000), "b": np.zeros(1_000_000)})
        data, note = kgw_e2b.frame_data(df)
        rows = kgw_e2b.DATA_MAX_CELLS // 2
        self.assertEqual(data["a"][:3], [0, 1, 2])
        self.assertEqual((len(data["a"]), len(data["b"])), (rows, rows))
        self.assertEqual(note, {"rows": rows, "total_rows": 1_000_000, "columns": 2,
                                "total_columns": 2})
        wide = pd.DataFrame(np.zeros((2, kgw_e2b.DATA_MAX_COLUMNS + 1)))
        data, note = kgw_e2b.frame_data(wide)
        self.assertEqual((len(data), note["total_columns"]),
                         (kgw_e2b.DATA_MAX_COLUMNS, kgw_e2b.DATA_MAX_COLUMNS + 1))
        long_text = pd.DataFrame({"t": ["x" * 100_000] * 200})
        data, note = kgw_e2b.frame_data(long_text)
        self.assertLessEqual(len(json.dumps(data)), kgw_e2b.DATA_MAX_BYTES)
        self.assertEqual((note["rows"], note["total_rows"]), (len(data["t"]), 200))
        self.assertGreater(len(data["t"]), 0)


class Formatters(unittest.TestCase):
    """On a real (terminal) IPython shell: the bundle of a figure, a DataFrame, other values."""

    @classmethod
    def setUpClass(cls):
        cls.home = tempfile.TemporaryDirectory(prefix="kgw-e2b-ipython-")
        os.environ["IPYTHONDIR"] = cls.home.name
        from IPython.core.interactiveshell import InteractiveShell

        cls.ip = InteractiveShell.instance(history_length=0)
        cls.ip.history_manager.enabled = False
        assert kgw_e2b.install(cls.ip)

    @classmethod
    def tearDownClass(cls):
        cls.ip.history_manager.end_session()
        cls.home.cleanup()

    def bundle(self, obj):
        return self.ip.display_formatter.format(obj)[0]

    def test_bundles(self):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 2, 1], label="down")
        b = self.bundle(fig)
        self.assertEqual(b["e2b/chart"]["type"], "line")
        self.assertNotIn("e2b/data", b)
        plt.close(fig)
        b = self.bundle(pd.DataFrame({"a": [1, 2]}))
        self.assertEqual(b["e2b/data"], {"a": [1, 2]})
        self.assertNotIn("kgw/truncated", b)
        self.assertNotIn("e2b/chart", b)
        b = self.bundle(pd.DataFrame({"a": np.arange(kgw_e2b.DATA_MAX_CELLS + 1)}))
        self.assertEqual(b["kgw/truncated"]["data"]["total_rows"], kgw_e2b.DATA_MAX_CELLS + 1)
        self.assertEqual(set(self.bundle(42)), {"text/plain"})

        class Own:
            def _repr_e2b_data_(self):
                return {"own": [1]}

        self.assertEqual(self.bundle(Own())["e2b/data"], {"own": [1]})


if __name__ == "__main__":
    unittest.main()
