"""ctxret.blend against a direct numpy formula (DESIGN §4 "Blend", seed "The blend")."""

from __future__ import annotations

import numpy as np
import pytest
from ctxret import InputError
from ctxret.blend import OWN_WEIGHT, blend_with_context, mean_vector, truncate_dims, unit
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

PROPS = settings(max_examples=200, deadline=None)
RNG = np.random.default_rng(20261016)


# --------------------------------------------------------------------------- reference


def ref_unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    # v / |v|, computed as (v/m) / |v/m| with m = max|v| so tiny or huge inputs stay exact
    m = np.max(np.abs(v), axis=-1, keepdims=True)
    v = np.divide(v, m, out=np.zeros_like(v), where=m > 0)
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, n, out=np.zeros_like(v), where=n > 0)


def ref_blend(a, b, w=0.8) -> np.ndarray:
    return ref_unit(w * ref_unit(a) + (1 - w) * ref_unit(b))


def rand(*shape) -> np.ndarray:
    return RNG.normal(size=shape)


# --------------------------------------------------------------------------- unit


def test_unit_matches_reference_and_keeps_zero():
    v = rand(16)
    np.testing.assert_allclose(unit(v), ref_unit(v), rtol=1e-12, atol=1e-12)
    assert np.linalg.norm(unit(v)) == pytest.approx(1.0)
    z = np.zeros(16)
    out = unit(z)
    assert np.array_equal(out, z)
    assert np.all(np.isfinite(out))


def test_unit_row_wise_with_a_zero_row():
    m = rand(5, 8)
    m[2] = 0.0
    out = unit(m)
    np.testing.assert_allclose(out, ref_unit(m), atol=1e-12)
    assert np.array_equal(out[2], np.zeros(8))
    np.testing.assert_allclose(np.linalg.norm(np.delete(out, 2, axis=0), axis=1), 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e20, 1e30])
def test_unit_of_very_small_or_large_vectors_is_still_unit(dtype, scale):
    # squaring must neither overflow (a nonzero vector silently becoming zero) nor underflow
    v = (np.array([3.0, -4.0, 0.0, 12.0]) * scale).astype(dtype)
    out = unit(v)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, np.array([3.0, -4.0, 0.0, 12.0]) / 13.0, rtol=1e-6)
    np.testing.assert_allclose(blend_with_context(v, v), out, rtol=1e-6)


def test_unit_accepts_lists_and_integers():
    np.testing.assert_allclose(unit([3, 4]), [0.6, 0.8])


# --------------------------------------------------------------------------- blend_with_context


def test_default_weight_is_point_eight():
    assert OWN_WEIGHT == 0.8
    a, b = rand(32), rand(32)
    np.testing.assert_allclose(blend_with_context(a, b), ref_blend(a, b, 0.8), atol=1e-12)


@pytest.mark.parametrize("w", [0.0, 0.2, 0.5, 0.8, 0.95, 1.0])
def test_blend_matches_reference_1d(w):
    a, b = rand(64) * 7.0, rand(64) * 0.01  # lengths must not change the effective weight
    out = blend_with_context(a, b, w)
    np.testing.assert_allclose(out, ref_blend(a, b, w), rtol=1e-10, atol=1e-12)
    assert np.linalg.norm(out) == pytest.approx(1.0)


def test_blend_weight_one_is_the_piece_and_zero_is_the_context():
    a, b = rand(10), rand(10)
    np.testing.assert_allclose(blend_with_context(a, b, 1.0), ref_unit(a), atol=1e-12)
    np.testing.assert_allclose(blend_with_context(a, b, 0.0), ref_unit(b), atol=1e-12)


def test_blend_is_scale_invariant():
    a, b = rand(12), rand(12)
    np.testing.assert_allclose(blend_with_context(3.0 * a, 0.001 * b), blend_with_context(a, b), atol=1e-12)


def test_blend_row_wise_with_one_context():
    chunks, ctx = rand(6, 20), rand(20)
    out = blend_with_context(chunks, ctx, 0.8)
    assert out.shape == (6, 20)
    np.testing.assert_allclose(out, ref_blend(chunks, ctx[None, :], 0.8), atol=1e-12)
    for i in range(6):
        np.testing.assert_allclose(out[i], blend_with_context(chunks[i], ctx), atol=1e-12)


def test_blend_row_wise_with_one_context_per_row():
    chunks, ctx = rand(6, 20), rand(6, 20)
    out = blend_with_context(chunks, ctx, 0.95)
    np.testing.assert_allclose(out, ref_blend(chunks, ctx, 0.95), atol=1e-12)
    for i in range(6):
        np.testing.assert_allclose(out[i], ref_blend(chunks[i], ctx[i], 0.95), atol=1e-12)


def test_blend_zero_vectors():
    z, b = np.zeros(8), rand(8)
    assert np.array_equal(blend_with_context(z, z), z)
    # unit(zero) is zero, so only the other side is left: the formula, not a special case
    np.testing.assert_allclose(blend_with_context(z, b), ref_unit(b), atol=1e-12)
    np.testing.assert_allclose(blend_with_context(b, z), ref_unit(b), atol=1e-12)
    assert np.all(np.isfinite(blend_with_context(np.zeros((3, 8)), np.zeros(8))))


def test_blend_opposite_inputs_at_half_weight_give_zero():
    a = ref_unit(rand(8))
    out = blend_with_context(a, -a, 0.5)
    assert np.all(np.isfinite(out))
    assert np.linalg.norm(out) == pytest.approx(0.0, abs=1e-12)


def test_blend_keeps_float32():
    a, b = rand(3, 16).astype(np.float32), rand(16).astype(np.float32)
    out = blend_with_context(a, b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref_blend(a, b), atol=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("side", ["own", "context"])
def test_blend_refuses_nan_and_inf(bad, side):
    a, b = rand(8), rand(8)
    (a if side == "own" else b)[3] = bad
    with pytest.raises(InputError, match="NaN or infinite") as err:
        blend_with_context(a, b)
    assert side in str(err.value)


def test_unit_and_mean_refuse_nan():
    with pytest.raises(InputError, match="NaN"):
        unit([1.0, float("nan")])
    with pytest.raises(InputError, match="NaN"):
        mean_vector([[1.0, 0.0], [float("inf"), 1.0]])


def test_blend_dimension_mismatch_names_both_sizes():
    with pytest.raises(InputError, match="dimension mismatch") as err:
        blend_with_context(rand(384), rand(256))
    assert "384" in str(err.value) and "256" in str(err.value)
    with pytest.raises(InputError) as err:
        blend_with_context(rand(4, 384), rand(4, 1024))
    assert "384" in str(err.value) and "1024" in str(err.value)


def test_blend_row_count_mismatch():
    with pytest.raises(InputError, match="3 own vectors but 2 context vectors"):
        blend_with_context(rand(3, 8), rand(2, 8))


def test_blend_2d_message_with_1d_chunk_is_refused():
    with pytest.raises(InputError, match="2-D"):
        blend_with_context(rand(8), rand(3, 8))


@pytest.mark.parametrize("w", [-0.01, 1.01, 2, float("nan"), float("inf")])
def test_blend_refuses_weight_outside_unit_interval(w):
    with pytest.raises(InputError, match="weight"):
        blend_with_context(rand(4), rand(4), w)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((2, 2, 2)), "1-D"),
        (np.zeros(0), "zero dimensions"),
        (["a", "b"], "numeric"),
        ([[1.0, 2.0], [3.0]], "equal-length"),
    ],
)
def test_blend_refuses_bad_shapes_and_types(bad, match):
    with pytest.raises((InputError,), match=match):
        blend_with_context(bad, bad)


# --------------------------------------------------------------------------- mean_vector


def test_mean_vector_is_unit_of_mean_of_unit_rows():
    rows = rand(7, 24) * RNG.uniform(0.01, 100, size=(7, 1))  # lengths must not matter
    out = mean_vector(rows)
    np.testing.assert_allclose(out, ref_unit(ref_unit(rows).mean(axis=0)), atol=1e-12)
    assert np.linalg.norm(out) == pytest.approx(1.0)


def test_mean_vector_of_one_vector_is_its_unit():
    v = rand(24)
    np.testing.assert_allclose(mean_vector(v), ref_unit(v), atol=1e-12)
    np.testing.assert_allclose(mean_vector(v[None, :]), ref_unit(v), atol=1e-12)


def test_mean_vector_zero_cases():
    assert np.array_equal(mean_vector(np.zeros((3, 5))), np.zeros(5))
    a = ref_unit(rand(5))
    assert np.linalg.norm(mean_vector(np.stack([a, -a]))) == pytest.approx(0.0, abs=1e-12)


def test_mean_vector_refuses_no_vectors():
    with pytest.raises(InputError, match="at least one vector"):
        mean_vector(np.zeros((0, 8)))
    with pytest.raises(InputError):
        mean_vector([])


def test_stored_side_recipe_from_the_seed():
    """context = meanVector(turnPieceVectors); stored = each piece blended with it."""
    pieces = rand(5, 32)
    context = mean_vector(pieces)
    stored = blend_with_context(pieces, context)
    expected = ref_blend(pieces, ref_unit(ref_unit(pieces).mean(axis=0))[None, :], 0.8)
    np.testing.assert_allclose(stored, expected, atol=1e-12)


# --------------------------------------------------------------------------- truncate_dims


def test_truncate_dims_keeps_the_first_numbers_and_renormalises():
    v = rand(1024)
    out = truncate_dims(v, 256)
    assert out.shape == (256,)
    np.testing.assert_allclose(out, ref_unit(v[:256]), atol=1e-12)
    assert np.linalg.norm(out) == pytest.approx(1.0)


def test_truncate_dims_row_wise_and_full_width():
    m = rand(4, 64)
    np.testing.assert_allclose(truncate_dims(m, 16), ref_unit(m[:, :16]), atol=1e-12)
    np.testing.assert_allclose(truncate_dims(m, 64), ref_unit(m), atol=1e-12)


def test_truncate_dims_zero_prefix_stays_zero():
    v = np.array([0.0, 0.0, 1.0])
    assert np.array_equal(truncate_dims(v, 2), np.zeros(2))


def test_truncate_dims_refuses_more_dims_than_the_vector_has():
    with pytest.raises(InputError) as err:
        truncate_dims(rand(256), 512)
    assert "256" in str(err.value) and "512" in str(err.value)


@pytest.mark.parametrize("dims", [0, -3, 2.5, "8"])
def test_truncate_dims_refuses_bad_dims(dims):
    with pytest.raises(InputError, match="dims"):
        truncate_dims(rand(16), dims)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

D = 8
_raw = arrays(np.float64, D, elements=st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False))
_unit_vec = _raw.filter(lambda v: np.linalg.norm(v) > 1e-3).map(lambda v: v / np.linalg.norm(v))
_weight = st.floats(0.0, 1.0, allow_nan=False)


@PROPS
@given(a=_unit_vec, b=_unit_vec, w=_weight)
def test_property_blend_of_unit_inputs_is_unit_or_zero(a, b, w):
    out = blend_with_context(a, b, w)
    assert out.shape == (D,)
    assert np.all(np.isfinite(out))
    n = np.linalg.norm(out)
    assert n == pytest.approx(1.0, abs=1e-9) or n == 0.0
    np.testing.assert_allclose(out, ref_blend(a, b, w), atol=1e-9)


@PROPS
@given(a=_raw, b=_raw, w=_weight)
def test_property_blend_of_any_finite_inputs_is_unit_or_zero(a, b, w):
    out = blend_with_context(a, b, w)
    n = np.linalg.norm(out)
    assert n == pytest.approx(1.0, abs=1e-9) or n == 0.0


@PROPS
@given(qp=_unit_vec, qc=_unit_vec, sp=_unit_vec, sc=_unit_vec, w=_weight)
def test_property_four_term_expansion_of_the_dot_product(qp, qc, sp, sc, w):
    """Seed: before the final normalisation, dot(query, stored) expands into four weighted terms."""
    q = blend_with_context(qp, qc, w)
    s = blend_with_context(sp, sc, w)
    q_len = np.linalg.norm(w * qp + (1 - w) * qc)
    s_len = np.linalg.norm(w * sp + (1 - w) * sc)
    lhs = float(np.dot(q, s)) * q_len * s_len
    rhs = (
        w * w * np.dot(qp, sp)
        + w * (1 - w) * np.dot(qp, sc)
        + (1 - w) * w * np.dot(qc, sp)
        + (1 - w) ** 2 * np.dot(qc, sc)
    )
    assert lhs == pytest.approx(float(rhs), abs=1e-9)


def test_four_term_expansion_seed_weights():
    """At w = 0.8 the terms weigh 0.64, 0.16, 0.16, 0.04 (the seed's table)."""
    qp, qc, sp, sc = (ref_unit(rand(D)) for _ in range(4))
    q, s = blend_with_context(qp, qc), blend_with_context(sp, sc)
    lhs = np.dot(q, s) * np.linalg.norm(0.8 * qp + 0.2 * qc) * np.linalg.norm(0.8 * sp + 0.2 * sc)
    rhs = 0.64 * qp @ sp + 0.16 * qp @ sc + 0.16 * qc @ sp + 0.04 * qc @ sc
    assert lhs == pytest.approx(rhs, abs=1e-12)


@PROPS
@given(
    m=arrays(np.float64, (5, D), elements=st.floats(-1.0, 1.0, allow_nan=False)),
    dims=st.integers(1, D),
)
def test_property_truncate_dims(m, dims):
    out = truncate_dims(m, dims)
    np.testing.assert_allclose(out, ref_unit(m[:, :dims]), atol=1e-12)
    norms = np.linalg.norm(out, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-9) | (norms == 0))
