package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// The part of SPDX 2.3 (https://spdx.github.io/spdx-spec/v2.3/) an SBOM of
// a Go binary needs: the binary as a file, its main module and every
// module linked into it as packages, each with its version and purl.
type (
	spdxDoc struct {
		SPDXVersion       string         `json:"spdxVersion"`
		DataLicense       string         `json:"dataLicense"`
		SPDXID            string         `json:"SPDXID"`
		Name              string         `json:"name"`
		DocumentNamespace string         `json:"documentNamespace"`
		CreationInfo      spdxCreation   `json:"creationInfo"`
		Packages          []spdxPackage  `json:"packages"`
		Files             []spdxFile     `json:"files"`
		Relationships     []spdxRelation `json:"relationships"`
	}
	spdxCreation struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
		Comment  string   `json:"comment,omitempty"`
	}
	spdxPackage struct {
		SPDXID           string    `json:"SPDXID"`
		Name             string    `json:"name"`
		VersionInfo      string    `json:"versionInfo"`
		DownloadLocation string    `json:"downloadLocation"`
		FilesAnalyzed    bool      `json:"filesAnalyzed"`
		ExternalRefs     []spdxRef `json:"externalRefs,omitempty"`
		PrimaryPurpose   string    `json:"primaryPackagePurpose,omitempty"`
	}
	spdxRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	spdxSum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	spdxFile struct {
		SPDXID    string    `json:"SPDXID"`
		FileName  string    `json:"fileName"`
		Checksums []spdxSum `json:"checksums"`
	}
	spdxRelation struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

// notIDChar is what an SPDX identifier may not hold.
var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]`)

// writeSBOM writes the SBOM of the Go binary at path: what `go version -m`
// prints, as SPDX, with version as the main module's version (a build from
// a work tree records none). The document's namespace is named after the
// binary's sha256, so that the same binary always gets the same document.
func writeSBOM(path, version, out string, created time.Time) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("sbom %s: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("sbom %s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	name := filepath.Base(path)
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: "https://github.com/eip-project/eip/spdx/" + name + "-" + hexSum,
		CreationInfo: spdxCreation{
			Created:  created.Format(time.RFC3339),
			Creators: []string{"Tool: eip-scripts-release"},
			Comment:  "From the Go build information of the binary (go version -m), built by " + info.GoVersion,
		},
		Files: []spdxFile{{SPDXID: "SPDXRef-File-" + notIDChar.ReplaceAllString(name, "-"), FileName: "./" + name,
			Checksums: []spdxSum{{Algorithm: "SHA256", Value: hexSum}}}},
	}
	fileID := doc.Files[0].SPDXID
	doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", fileID})
	add := func(path, version, purpose string) string {
		id := "SPDXRef-Package-" + notIDChar.ReplaceAllString(path, "-")
		if version == "" || version == "(devel)" {
			version = "NOASSERTION"
		}
		p := spdxPackage{SPDXID: id, Name: path, VersionInfo: version, DownloadLocation: "NOASSERTION", PrimaryPurpose: purpose}
		if version != "NOASSERTION" {
			p.ExternalRefs = []spdxRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + path + "@" + version}}
		}
		doc.Packages = append(doc.Packages, p)
		return id
	}
	main := add(info.Main.Path, version, "APPLICATION")
	doc.Relationships = append(doc.Relationships, spdxRelation{fileID, "GENERATED_FROM", main})
	goID := add("stdlib", info.GoVersion, "LIBRARY")
	doc.Relationships = append(doc.Relationships, spdxRelation{main, "DEPENDS_ON", goID})
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		doc.Relationships = append(doc.Relationships, spdxRelation{main, "DEPENDS_ON", add(d.Path, d.Version, "LIBRARY")})
	}
	j, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("sbom %s: %w", path, err)
	}
	return os.WriteFile(out, append(j, '\n'), 0o644)
}
