"""RoPE geometry (Fig 4A, Fig 4B): the Index construction's vectors, a model's queries and keys on one plane."""

import math

import numpy as np
import pandas as pd
import pytest

from conftest import model_config
from posym.nn.gptj import PosymModel
from posym.studies.a import rope_geometry as geometry


def test_index_construction_query_lands_on_the_key_sigma_back():
    theta, position, sigma = 0.8, 6, 2
    vectors = geometry.index_construction_geometry(theta, position, sigma)
    keys = vectors[vectors["kind"] == "key"].set_index(["stage", "position"])
    queries = vectors[vectors["kind"] == "query"].set_index("stage")
    assert np.allclose(keys.loc["pre-RoPE"][["x", "y"]], [0.0, 1.0])  # every key is v
    # before RoPE the query is v turned back by σθ; after it, it sits on the key at position − σ
    angle = math.pi / 2 - sigma * theta
    assert np.allclose(
        queries.loc["pre-RoPE", ["x", "y"]].to_numpy(float), [math.cos(angle), math.sin(angle)], atol=1e-6
    )
    landed = queries.loc["post-RoPE", ["x", "y"]].to_numpy(float)
    distances = np.linalg.norm(keys.loc["post-RoPE"][["x", "y"]].to_numpy() - landed, axis=1)
    assert distances.argmin() == position - sigma and distances.min() < 1e-5
    assert np.sort(distances)[1] > 0.1


def test_plane_coordinates_are_the_post_rope_vectors_of_that_plane():
    """A repeated token has one pre-RoPE query and key, so on plane k the position-p vectors are position 0's
    turned by p·g_k — only if the coordinates are post-RoPE and come from dims (2k − 2, 2k − 1)."""
    model = PosymModel(model_config(9, n_layer=2, d_model=16)).initialise([2]).eval()
    plane = 3
    g = 10000 ** (-2 * (plane - 1) / 16)
    coordinates = geometry.plane_coordinates(model, np.full((2, 17), 4), layer=1, plane_id=plane)
    assert len(coordinates) == 2 * 17 * 2 * 2  # samples x positions x (query, key) x (post-, pre-RoPE)
    for kind in ("query", "key"):
        vectors = {}
        for stage in ("post-RoPE", "pre-RoPE"):
            rows = coordinates[
                (coordinates["kind"] == kind) & (coordinates["sample"] == 1) & (coordinates["stage"] == stage)
            ]
            vectors[stage] = rows.sort_values("position")[["x", "y"]].to_numpy() @ [1, 1j]
        assert np.allclose(vectors["post-RoPE"] / vectors["post-RoPE"][0], np.exp(1j * g * np.arange(17)), atol=1e-4)
        assert np.allclose(vectors["pre-RoPE"], vectors["pre-RoPE"][0], atol=1e-5)  # one token, one projection


def test_plane_coordinates_refuse_a_missing_layer():
    model = PosymModel(model_config(9, n_layer=1, d_model=16)).initialise([2])
    with pytest.raises(ValueError, match="layer 1"):
        geometry.plane_coordinates(model, np.ones((1, 5), dtype=np.int64), layer=1, plane_id=1)


def test_dominant_plane_is_table1s_id_of_the_layer():
    rows = [
        {"inputs": "test", "layer": layer, "head": 0, "id": plane, "frequency": 1.0, "use": 40.0 * (plane == peak)}
        for layer, peak in ((0, 1), (1, 2))
        for plane in range(1, 9)
    ]
    use = pd.DataFrame(rows)
    assert geometry.dominant_plane(use, layer=1) == 2
    assert geometry.dominant_plane(use, layer=0) == 1
    with pytest.raises(ValueError):
        geometry.dominant_plane(use, layer=5)
