"""sftbuild.review stage."""
