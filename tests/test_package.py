import skfilter


def test_version_is_a_string():
    assert isinstance(skfilter.__version__, str) and skfilter.__version__
