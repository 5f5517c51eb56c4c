"""A batch's rows as one DataFrame: the values and dtypes of Arrow's own conversion, every column kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflow_ray_provider.workloads.zone_training.frame import segments_frame

pytestmark = pytest.mark.unit


def arrow_reference(segments, columns) -> pd.DataFrame:
    """What the plain Arrow route gives for the same rows."""
    pieces = [t.select(columns).slice(start, rows) for t, start, rows in segments]
    return pa.concat_tables(pieces, promote_options="permissive").to_pandas()


def chunk(seed: int, rows: int = 50) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "y": pa.array(rng.integers(0, 2, rows), pa.int64()),
            "f0": rng.normal(size=rows),
            "f1": pa.array(rng.normal(size=rows).astype(np.float32)),
            "f2": rng.normal(size=rows),
            "name": pa.array([f"s{i % 7}" for i in range(rows)]),
            "flag": pa.array([i % 2 == 0 for i in range(rows)]),
            "maybe": pa.array([None if i % 5 == 0 else float(i) for i in range(rows)]),
            "count": pa.array([None if i % 4 == 0 else i for i in range(rows)], pa.int32()),
        }
    )


SEGMENTS = [(chunk(0), 3, 10), (chunk(1), 0, 7), (chunk(0), 20, 15), (chunk(2), 49, 1)]


def test_numeric_columns_match_arrow_and_share_one_block_per_dtype() -> None:
    columns = ["y", "f0", "f2"]
    frame = segments_frame(SEGMENTS, columns)
    pd.testing.assert_frame_equal(frame, arrow_reference(SEGMENTS, columns))
    assert list(frame.index) == list(range(33))
    assert frame.dtypes.to_dict() == {"y": np.int64, "f0": np.float64, "f2": np.float64}
    assert len(frame._mgr.blocks) == 2  # int64 [y] and float64 [f0, f2], no per-column blocks


@pytest.mark.parametrize(
    "columns",
    [
        ["name", "y", "f0"],  # strings: Arrow's conversion
        ["flag", "f0"],  # booleans
        ["maybe", "count", "f2"],  # nulls: NaN floats, ints with nulls as Arrow converts them
        ["f0", "y", "f2", "f1"],  # interleaved dtypes keep the asked order
    ],
)
def test_every_column_kind_matches_arrow_in_the_asked_order(columns: list[str]) -> None:
    frame = segments_frame(SEGMENTS, columns)
    assert list(frame.columns) == columns
    pd.testing.assert_frame_equal(frame, arrow_reference(SEGMENTS, columns))


def test_tables_with_several_chunks_or_different_dtypes_still_match() -> None:
    multi = pa.concat_tables([chunk(3, 20), chunk(4, 30)])  # two chunks per column
    assert multi.column("f0").num_chunks == 2
    as_float = chunk(5).set_column(0, "y", pa.array(np.arange(50, dtype=np.float64)))
    segments = [(multi, 15, 10), (as_float, 5, 5)]  # y: int64 in one table, float64 in the other
    pd.testing.assert_frame_equal(
        segments_frame(segments, ["y", "f0"]), arrow_reference(segments, ["y", "f0"])
    )


def test_the_frame_owns_its_data() -> None:
    source = chunk(6)
    frame = segments_frame([(source, 0, 10)], ["f0"])
    frame.loc[0, "f0"] = 1e9
    assert source.column("f0")[0].as_py() != 1e9


def test_no_rows_is_an_error() -> None:
    with pytest.raises(ValueError, match="no rows"):
        segments_frame([(chunk(7), 0, 0)], ["f0"])


def test_array_block_matches_arrow_and_fits_the_same_model_as_a_row_major_copy() -> None:
    """The feature block is column-major; built-in fits on its views equal fits on C-ordered rows."""
    from airflow_ray_provider.workloads.zone_training.frame import segments_arrays
    from airflow_ray_provider.workloads.zone_training.trainers import array_entry, load_trainer

    segments = [(chunk(1, 400), 10, 300), (chunk(2, 400), 0, 250), (chunk(3, 400), 100, 200)]
    x, y = segments_arrays(segments, "y", ["f0", "f1", "f2"])
    reference = arrow_reference(segments, ["y", "f0", "f1", "f2"])
    assert x.shape == (750, 3) and x.flags.f_contiguous and not x.flags.c_contiguous
    np.testing.assert_array_equal(x, reference[["f0", "f1", "f2"]].to_numpy(dtype=np.float64))
    np.testing.assert_array_equal(y, reference["y"].to_numpy())
    fit = array_entry(load_trainer("ridge"))
    assert fit is not None
    names = ["f0", "f1", "f2"]
    model, metrics = fit(x[300:], y[300:], feature_names=names)
    row_major, same = fit(np.ascontiguousarray(x[300:]), y[300:], feature_names=names)
    assert model.coef_.tobytes() == row_major.coef_.tobytes() and model.intercept_ == row_major.intercept_
    assert metrics == same


def test_array_block_casts_integer_boolean_and_null_features_as_arrow_does() -> None:
    """Integer, float32, boolean and null-holding features become the float64 values of Arrow's conversion."""
    from airflow_ray_provider.workloads.zone_training.frame import segments_arrays

    features = ["y", "f1", "flag", "maybe", "count"]
    x, _ = segments_arrays(SEGMENTS, "f0", features)
    expected = arrow_reference(SEGMENTS, features).astype(np.float64).to_numpy()
    np.testing.assert_array_equal(x, expected)
