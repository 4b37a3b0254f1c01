"""Harness programs the tests run by file path or `-m`: stdlib and the harness SDK only
(scripts/build-image.sh copies this folder into the Docker image)."""
