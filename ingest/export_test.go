package ingest

// VenvPython gives the external tests (package ingest_test) the test
// venv's interpreter, found as the internal tests find it.
var VenvPython = venvPython
