# mcpvisor on Nomad: N replicas registered in Consul, behind HAProxy, which
# keeps each 2025 session on the replica that created it (a stick table on
# Mcp-Session-Id) and checks /readyz. The image is ../Dockerfile's.
#
#   nomad var put nomad/jobs/mcpvisor mcpvisor_token=… tools_token=…
#   nomad job run mcpvisor.nomad.hcl
#
# Stopping an allocation: Nomad deregisters the service from Consul, waits
# shutdown_delay, then sends kill_signal; mcpvisor answers /readyz with 503,
# keeps serving for host.drain (5 s), finishes the calls in flight (at most
# 20 s) and stops its servers. kill_timeout covers all of it (5 + 20 + 10 s,
# rounded up to 40 s) before Nomad sends SIGKILL.

job "mcpvisor" {
  type = "service"

  group "mcpvisor" {
    count = 3

    # Rolling upgrades: one allocation at a time, the next only once the new
    # one has passed its checks for 10 s.
    update {
      max_parallel     = 1
      min_healthy_time = "10s"
      healthy_deadline = "2m"
      auto_revert      = true
    }

    # A lost node's allocations are replaced elsewhere.
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "http" {
        to = 8811
      }
    }

    service {
      name     = "mcpvisor"
      port     = "http"
      provider = "consul"
      tags     = ["mcp"]

      # Liveness: the process serves HTTP; a stuck one is restarted.
      check {
        name     = "alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }

      # Readiness: 503 while draining or while a required server is down;
      # Consul then leaves the replica out of the HAProxy servers below.
      # Probes need no token.
      check {
        name     = "ready"
        type     = "http"
        path     = "/readyz"
        interval = "2s"
        timeout  = "1s"
      }
    }

    task "mcpvisor" {
      driver = "docker"

      # Deregistered from Consul first, then SIGTERM: the drain covers what
      # is still in flight.
      shutdown_delay = "2s"
      kill_signal    = "SIGTERM"
      kill_timeout   = "40s"

      config {
        image = "registry.example.com/mcpvisor:0.1.0"
        args  = ["run", "-config", "/local/config.hcl"]
        ports = ["http"]
      }

      # ($${…} is HCL's escape: the file gets mcpvisor's own ${env("…")}.)
      template {
        destination = "local/config.hcl"
        change_mode = "signal"
        # SIGHUP reloads the server blocks that changed.
        change_signal = "SIGHUP"
        data          = <<-HCL
          host {
            listen  = "0.0.0.0:8811"
            replica = env("NOMAD_ALLOC_NAME")
            drain   = "5s"
            log_format = "json"
            auth {
              bearer_token = env("MCPVISOR_TOKEN")
            }
          }

          server "tools" {
            url      = "http://{{ with service "tools" }}{{ with index . 0 }}{{ .Address }}:{{ .Port }}{{ end }}{{ end }}/mcp"
            headers  = { Authorization = "Bearer $${env("TOOLS_TOKEN")}" }
            required = true
          }
        HCL
      }

      # Secrets from Nomad Variables (or Vault), as environment variables
      # the config reads with env().
      template {
        destination = "secrets/tokens.env"
        env         = true
        change_mode = "restart"
        data        = <<-ENV
          {{ with nomadVar "nomad/jobs/mcpvisor" }}
          MCPVISOR_TOKEN={{ .mcpvisor_token }}
          TOOLS_TOKEN={{ .tools_token }}
          {{ end }}
        ENV
      }

      resources {
        cpu    = 250
        memory = 256
      }
    }
  }

  group "haproxy" {
    count = 1

    network {
      port "http" {
        static = 8811
      }
    }

    service {
      name     = "mcpvisor-lb"
      port     = "http"
      provider = "consul"

      check {
        type     = "tcp"
        interval = "5s"
        timeout  = "1s"
      }
    }

    task "haproxy" {
      driver = "docker"

      config {
        image        = "haproxy:2.8"
        network_mode = "host"
        args         = ["-f", "/local/haproxy.cfg"]
      }

      # The servers are the replicas Consul lists as passing; HAProxy also
      # checks /readyz itself, so a draining replica leaves at once.
      template {
        destination   = "local/haproxy.cfg"
        change_mode   = "signal"
        change_signal = "SIGUSR2"
        data          = <<-CFG
          global
              log stdout format raw local0 info
          defaults
              mode http
              log global
              option httplog
              option http-no-delay
              timeout connect 2s
              timeout http-request 10s
              timeout client 10m
              timeout server 10m
              timeout tunnel 1h
              retries 3
              option redispatch 1
              retry-on conn-failure
          frontend mcp
              bind :8811
              default_backend mcpvisor
          backend mcpvisor
              balance leastconn
              stick-table type string len 128 size 1m expire 1h
              stick match req.hdr(mcp-session-id)
              stick store-response res.hdr(mcp-session-id)
              option httpchk
              http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
              http-check expect status 200
              default-server check inter 1s fastinter 500ms downinter 1s fall 2 rise 2
          {{ range service "mcpvisor" }}
              server {{ .Node }}-{{ .Port }} {{ .Address }}:{{ .Port }}
          {{ end }}
        CFG
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
