package config

// defaultHost is the host block's settings when the file leaves them unset.
// Listen stays empty: `mcpvisor run` decides between DefaultListen and
// stdio, and Validate must not treat an unset listen as a chosen one.
func defaultHost() Host {
	return Host{
		LogLevel:              "info",
		LogFormat:             "text",
		Separator:             DefaultSeparator,
		SessionIdleTimeout:    DefaultSessionIdleTimeout,
		MaxSessions:           DefaultMaxSessions,
		MaxSessionsPerSubject: DefaultMaxSessionsPerSubject,
		Drain:                 DefaultDrain,
		MaxInflightBytes:      DefaultMaxInflightBytes,
	}
}

// defaultServer is a server block named name with every optional value at
// its default and no transport yet.
func defaultServer(name string) *Server {
	return &Server{
		Name:           name,
		Prefix:         name,
		Timeout:        DefaultTimeout,
		ConnectTimeout: DefaultConnectTimeout,
		Reconnect:      defaultReconnect(),
		Breaker:        defaultBreaker(),
		MaxMessageSize: DefaultMaxMessageSize,
	}
}

func defaultReconnect() Reconnect {
	return Reconnect{
		MaxRetries:   DefaultMaxRetries,
		MaxBackoff:   DefaultMaxBackoff,
		ParkedRetry:  DefaultParkedRetry,
		HealthyAfter: DefaultHealthyAfter,

		UnresponsiveAfter: DefaultUnresponsiveAfter,
	}
}

func defaultBreaker() Breaker {
	return Breaker{
		Threshold: DefaultBreakerThreshold,
		Cooldown:  DefaultBreakerCooldown,
	}
}

// ApplyDefaults fills the zero values of a Config built in Go with the
// defaults Load and Parse apply to unset attributes, so that an embedding
// program can write only what it means and then call Validate.
//
// Go has no "unset", so zero stands for it, with three consequences:
//   - A zero Reconnect is replaced as a whole; otherwise only its zero
//     durations are, and MaxRetries 0 (park after the first failure) is kept.
//   - Prefix is never touched: an empty Prefix exposes names unchanged, as
//     `prefix = ""` does. Set Prefix = Name to namespace a server's tools.
//   - Transport is derived from Command, URL or Plugin when empty.
//
// Host.Listen stays as it is, and so does Host.Drain: zero is a choice
// there (stop at once on SIGTERM). Loading a file never needs ApplyDefaults.
func (c *Config) ApplyDefaults() {
	if c == nil {
		return
	}
	def := defaultHost()
	if c.Host.LogLevel == "" {
		c.Host.LogLevel = def.LogLevel
	}
	if c.Host.LogFormat == "" {
		c.Host.LogFormat = def.LogFormat
	}
	if c.Host.Separator == "" {
		c.Host.Separator = def.Separator
	}
	if c.Host.SessionIdleTimeout == 0 {
		c.Host.SessionIdleTimeout = def.SessionIdleTimeout
	}
	if c.Host.MaxSessions == 0 {
		c.Host.MaxSessions = def.MaxSessions
	}
	if c.Host.MaxSessionsPerSubject == 0 {
		c.Host.MaxSessionsPerSubject = def.MaxSessionsPerSubject
	}
	if c.Host.MaxInflightBytes == 0 {
		c.Host.MaxInflightBytes = def.MaxInflightBytes
	}
	for _, s := range c.Servers {
		if s == nil {
			continue
		}
		if s.Transport == "" {
			s.Transport = impliedTransport(s)
		}
		if s.Timeout == 0 {
			s.Timeout = DefaultTimeout
		}
		if s.ConnectTimeout == 0 {
			s.ConnectTimeout = DefaultConnectTimeout
		}
		if s.MaxMessageSize == 0 {
			s.MaxMessageSize = DefaultMaxMessageSize
		}
		r := defaultReconnect()
		if s.Reconnect == (Reconnect{}) {
			s.Reconnect = r
		}
		if s.Reconnect.MaxBackoff == 0 {
			s.Reconnect.MaxBackoff = r.MaxBackoff
		}
		if s.Reconnect.ParkedRetry == 0 {
			s.Reconnect.ParkedRetry = r.ParkedRetry
		}
		if s.Reconnect.HealthyAfter == 0 {
			s.Reconnect.HealthyAfter = r.HealthyAfter
		}
		if s.Reconnect.UnresponsiveAfter == 0 {
			s.Reconnect.UnresponsiveAfter = r.UnresponsiveAfter
		}
		s.Health.applyDefaults()
		b := defaultBreaker()
		if s.Breaker.Threshold == 0 {
			s.Breaker.Threshold = b.Threshold
		}
		if s.Breaker.Cooldown == 0 {
			s.Breaker.Cooldown = b.Cooldown
		}
	}
}

// impliedTransport is the transport a server's attributes select, or ""
// when they select none. With more than one set, it picks one; Validate
// reports the conflict.
func impliedTransport(s *Server) Transport {
	switch {
	case s.Command != "":
		return TransportStdio
	case s.URL != "":
		return TransportStreamable
	case s.Plugin != nil:
		return TransportPlugin
	}
	return ""
}

// applyDefaults fills the timeout of a health block that sets only its
// interval.
func (h *Health) applyDefaults() {
	if h.Interval > 0 && h.Timeout == 0 {
		h.Timeout = min(DefaultHealthTimeout, h.Interval/2)
	}
}
