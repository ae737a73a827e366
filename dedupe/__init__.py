"""sftbuild.dedupe stage."""
