// Package layercheck is a test only: it holds the import graph of
// arpatch's non-test Go files to the layer order that docs/layers.md
// declares (lowest first). An import of a package in a higher layer, a
// circle between top-level folders, or a package no row places fails the
// test, naming the file and import. The table in docs/layers.md is read
// by the test, so the doc and the check cannot disagree.
package layercheck
