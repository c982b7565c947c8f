package mcpregistry

// The server.json shapes mcpvisor reads: the fields of the registry's
// schema (static.modelcontextprotocol.io/schemas/2025-12-11) that decide
// how a server is run or reached. The rest (icons, repository, _meta) is
// ignored; unknown fields are allowed, as the schema grows.

// Registry types of a package (server.json packages[].registryType).
const (
	TypeNPM  = "npm"
	TypePyPI = "pypi"
	TypeOCI  = "oci"
)

// Transport types (packages[].transport.type, remotes[].type).
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportSSE            = "sse"
)

// Default package registries: a package naming another gets it passed to
// its runner.
const (
	DefaultNPMRegistry  = "https://registry.npmjs.org"
	DefaultPyPIRegistry = "https://pypi.org"
)

// Entry is one answer item: a server.json and the registry's metadata.
type Entry struct {
	Server ServerJSON `json:"server"`
	Meta   struct {
		Official *struct {
			Status   string `json:"status"`
			IsLatest bool   `json:"isLatest"`
		} `json:"io.modelcontextprotocol.registry/official"`
	} `json:"_meta"`
}

// Status is the registry's lifecycle status of the entry ("active",
// "deprecated", "deleted"), or "".
func (e Entry) Status() string {
	if e.Meta.Official == nil {
		return ""
	}
	return e.Meta.Official.Status
}

// entryList is a page of entries.
type entryList struct {
	Servers  []Entry `json:"servers"`
	Metadata struct {
		NextCursor string `json:"nextCursor"`
		Count      int    `json:"count"`
	} `json:"metadata"`
}

// ServerJSON is a server.json.
type ServerJSON struct {
	Name        string      `json:"name"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Version     string      `json:"version"`
	WebsiteURL  string      `json:"websiteUrl"`
	Packages    []Package   `json:"packages"`
	Remotes     []Transport `json:"remotes"`
}

// Package is a way to run the server locally.
type Package struct {
	RegistryType         string          `json:"registryType"`
	RegistryBaseURL      string          `json:"registryBaseUrl"`
	Identifier           string          `json:"identifier"`
	Version              string          `json:"version"`
	RuntimeHint          string          `json:"runtimeHint"`
	Transport            Transport       `json:"transport"`
	RuntimeArguments     []Argument      `json:"runtimeArguments"`
	PackageArguments     []Argument      `json:"packageArguments"`
	EnvironmentVariables []KeyValueInput `json:"environmentVariables"`
}

// Transport is a package's transport or a remote.
type Transport struct {
	Type      string           `json:"type"`
	URL       string           `json:"url"`
	Headers   []KeyValueInput  `json:"headers"`
	Variables map[string]Input `json:"variables"`
}

// Input is a value the user may have to provide.
type Input struct {
	Description string           `json:"description"`
	IsRequired  bool             `json:"isRequired"`
	IsSecret    bool             `json:"isSecret"`
	Format      string           `json:"format"`
	Value       string           `json:"value"`
	Default     string           `json:"default"`
	Placeholder string           `json:"placeholder"`
	Choices     []string         `json:"choices"`
	Variables   map[string]Input `json:"variables"`
}

// KeyValueInput is an environment variable or a header.
type KeyValueInput struct {
	Input
	Name string `json:"name"`
}

// Argument is a command-line argument: positional (its value) or named
// (its name, then its value).
type Argument struct {
	Input
	Type      string `json:"type"`
	Name      string `json:"name"`
	ValueHint string `json:"valueHint"`
}
