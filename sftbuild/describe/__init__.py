"""sftbuild.describe stage."""
