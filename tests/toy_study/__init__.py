"""A toy study: what CONTRIBUTING.md's recipe "add a study" makes, for the tests that follow the recipes
(tests/workflow/test_contributing.py copies this folder to workflow/posym/studies/toy/ of a repository copy)."""
