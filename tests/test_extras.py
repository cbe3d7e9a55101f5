"""The names a package imports on first access, as their extras are optional: each
package's ``__getattr__`` is :func:`covonaut_es._extras.lazy_names`."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

import covonaut_es
import covonaut_es.providers.openai
import covonaut_es.runtime
import covonaut_es.service
import covonaut_es.service._jwt

PACKAGES = (covonaut_es, covonaut_es.runtime, covonaut_es.service)


def test_a_lazy_name_is_the_class_of_its_module() -> None:
    """A provider adapter and the JWT verifier, reached through each package that names
    them, are the classes their modules define."""
    jwt_verifier = covonaut_es.service._jwt.JwtReviewerVerifier
    assert covonaut_es.runtime.JwtReviewerVerifier is jwt_verifier
    assert covonaut_es.service.JwtReviewerVerifier is jwt_verifier
    assert covonaut_es.OpenAIProvider is covonaut_es.providers.openai.OpenAIProvider


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_a_name_no_package_has_is_an_attribute_error(package: ModuleType) -> None:
    """Any other name is the AttributeError Python gives for a module's missing name."""
    with pytest.raises(AttributeError, match=f"^module '{package.__name__}' has no attribute"):
        _ = package.NoSuchName


@pytest.mark.parametrize(
    "package", (covonaut_es.runtime, covonaut_es.service), ids=lambda package: package.__name__
)
def test_a_lazy_name_whose_extra_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, package: ModuleType
) -> None:
    """Without PyJWT, the JWT verifier reached through a package fails with the extra
    to install, each time it is asked for."""
    monkeypatch.setitem(sys.modules, "jwt", None)
    monkeypatch.delitem(sys.modules, "covonaut_es.service._jwt")
    for holder in (covonaut_es.runtime, covonaut_es.service):
        monkeypatch.delattr(holder, "JwtReviewerVerifier", raising=False)
    for _ in range(2):
        with pytest.raises(ImportError, match=r"pip install 'covonaut-es\[inbox\]'"):
            _ = package.JwtReviewerVerifier
