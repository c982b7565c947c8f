package shared

/*
Design note: the wire protocol, without a protoc step.

The service is small enough to describe by hand (see transport.proto for the
same thing in protobuf syntax, for authors in other languages):

	service Transport {
	  rpc Configure(google.protobuf.BytesValue) returns (google.protobuf.Empty);
	  rpc Open(stream google.protobuf.BytesValue) returns (stream google.protobuf.BytesValue);
	}

Both messages are well-known protobuf types, so the default gRPC codec
carries them and no generated code is needed; the grpc.ServiceDesc below is
what protoc-gen-go-grpc would have written.

One Open stream is one connection. The plugin answers a successful Open with
a single empty BytesValue before any frame, so the host learns that the
connection is up (and an Open error arrives as the stream's status, at once,
rather than on the first read). After that every message in either
direction is one JSON-RPC frame. The host half-closes the stream to close
the connection; the plugin ends the stream (status OK) when the server
closed it, or with an error status when it broke.
*/

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	serviceName     = "mcpvisor.transport.v1.Transport"
	configureMethod = "/" + serviceName + "/Configure"
	openMethod      = "/" + serviceName + "/Open"
)

// transportServer is the handler type of the service description; it is
// what a gRPC server checks the registered implementation against.
type transportServer interface {
	configure(ctx context.Context, in *wrapperspb.BytesValue) (*emptypb.Empty, error)
	open(stream grpc.ServerStream) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*transportServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Configure",
		Handler:    configureHandler,
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Open",
		Handler:       openHandler,
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "shared/transport.proto",
}

func configureHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(transportServer).configure(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: configureMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(transportServer).configure(ctx, req.(*wrapperspb.BytesValue))
	})
}

func openHandler(srv any, stream grpc.ServerStream) error {
	return srv.(transportServer).open(stream)
}

// TransportPlugin is the go-plugin glue for Transport. Plugins get it
// through Serve; the host dispenses it from PluginMap and receives a
// *GRPCClient.
type TransportPlugin struct {
	// NetRPCUnsupportedPlugin refuses the legacy net/rpc protocol: only gRPC
	// is spoken.
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin's implementation. It is nil on the host side.
	Impl Transport
}

// GRPCServer registers the plugin's implementation with the plugin's gRPC
// server. It is called by go-plugin inside the plugin process.
func (p *TransportPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("shared: TransportPlugin served without an implementation")
	}
	s.RegisterService(&serviceDesc, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns the host's view of the plugin, a *GRPCClient. It is
// called by go-plugin in the host when the plugin is dispensed; ctx is
// canceled by go-plugin when the plugin process exits.
func (p *TransportPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &GRPCClient{conn: c, exited: ctx}, nil
}

// GRPCClient is the host side of a transport plugin: a Transport whose
// calls go to the plugin process over gRPC.
type GRPCClient struct {
	conn   *grpc.ClientConn
	exited context.Context
}

var _ Transport = (*GRPCClient)(nil)

// Exited is closed when go-plugin has seen the plugin process exit (it has
// been reaped). It is the host's death signal for the plugin; nothing polls.
func (c *GRPCClient) Exited() <-chan struct{} { return c.exited.Done() }

// Configure sends the config JSON to the plugin. When the plugin rejects
// it, the error wraps ErrConfigRejected and carries the plugin's text.
func (c *GRPCClient) Configure(ctx context.Context, config []byte) error {
	err := c.conn.Invoke(ctx, configureMethod, &wrapperspb.BytesValue{Value: config}, new(emptypb.Empty))
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
		return fmt.Errorf("%w: %s", ErrConfigRejected, st.Message())
	}
	return plainError(err)
}

// Open asks the plugin to open a connection and waits, at most until ctx is
// done, for it to be up. The connection itself is not bound to ctx.
func (c *GRPCClient) Open(ctx context.Context) (Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.conn.NewStream(sctx, &serviceDesc.Streams[0], openMethod)
	if err != nil {
		cancel()
		return nil, plainError(err)
	}
	ack := make(chan error, 1)
	go func() { ack <- stream.RecvMsg(new(wrapperspb.BytesValue)) }()
	select {
	case err := <-ack:
		if err != nil {
			cancel()
			if errors.Is(err, io.EOF) {
				return nil, errors.New("plugin ended the connection while opening it")
			}
			return nil, plainError(err)
		}
	case <-ctx.Done():
		cancel()
		<-ack
		return nil, ctx.Err()
	}
	cc := &clientConn{
		stream: stream,
		cancel: cancel,
		in:     make(chan []byte),
		closed: make(chan struct{}),
		ended:  make(chan struct{}),
	}
	go cc.pump()
	return cc, nil
}

// plainError turns a gRPC status error into an error carrying just the
// plugin's message (and the code, when it says something).
func plainError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unknown, codes.Unavailable, codes.InvalidArgument, codes.FailedPrecondition:
		return errors.New(st.Message())
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	}
	return fmt.Errorf("%s (%s)", st.Message(), st.Code())
}

// clientConn is the host's end of one Open stream.
type clientConn struct {
	stream grpc.ClientStream
	cancel context.CancelFunc

	in     chan []byte   // frames from the plugin, fed by pump
	ended  chan struct{} // closed by pump when the stream ended; err says why
	err    error
	closed chan struct{} // closed by Close

	sendMu    sync.Mutex // SendMsg and CloseSend must not run concurrently
	closeOnce sync.Once
}

// pump is the stream's only reader: it moves frames into c.in until the
// stream ends or the connection is closed.
func (c *clientConn) pump() {
	defer close(c.ended)
	for {
		m := new(wrapperspb.BytesValue)
		if err := c.stream.RecvMsg(m); err != nil {
			select {
			case <-c.closed:
				// Close canceled the stream; that is the reason, not the
				// cancellation it caused.
				c.err = ErrConnClosed
				return
			default:
			}
			if errors.Is(err, io.EOF) {
				c.err = io.EOF
			} else {
				c.err = plainError(err)
			}
			return
		}
		if len(m.Value) == 0 {
			continue
		}
		select {
		case c.in <- m.Value:
		case <-c.closed:
			c.err = ErrConnClosed
			return
		}
	}
}

func (c *clientConn) Send(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	select {
	case <-c.closed:
		return ErrConnClosed
	default:
	}
	err := c.stream.SendMsg(&wrapperspb.BytesValue{Value: frame})
	if errors.Is(err, io.EOF) {
		// The stream is gone; its status, which says why, is what the
		// reader gets.
		select {
		case <-c.ended:
			if c.err != nil && !errors.Is(c.err, io.EOF) {
				return c.err
			}
		default:
		}
		return ErrConnClosed
	}
	if err != nil {
		return plainError(err)
	}
	return nil
}

func (c *clientConn) Recv(ctx context.Context) ([]byte, error) {
	select {
	case f := <-c.in:
		return f, nil
	case <-c.ended:
		return nil, c.err
	case <-c.closed:
		return nil, ErrConnClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *clientConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.sendMu.Lock()
		// Half-close first so a plugin sees a clean end and can close its
		// own connection politely, then release the stream.
		c.stream.CloseSend()
		c.sendMu.Unlock()
		c.cancel()
	})
	return nil
}

// grpcServer is the plugin's side of the service.
type grpcServer struct {
	impl Transport
}

func (s *grpcServer) configure(ctx context.Context, in *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	config := in.GetValue()
	if len(config) == 0 {
		config = []byte("{}")
	}
	if err := s.impl.Configure(ctx, config); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return new(emptypb.Empty), nil
}

// open serves one connection. The handler's goroutine is the only one that
// sends on the stream (server frames); a second goroutine is the only one
// that receives (host frames). The handler returns when the server's side
// ends or the host closed the stream, which also unblocks that receiver.
func (s *grpcServer) open(stream grpc.ServerStream) error {
	ctx := stream.Context()
	conn, err := s.impl.Open(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer conn.Close()
	if err := stream.SendMsg(new(wrapperspb.BytesValue)); err != nil {
		return err
	}

	// hostErr is set when the host side ended first: a half-close (io.EOF),
	// a broken stream, or a frame the server would not take.
	var (
		hostMu  sync.Mutex
		hostErr error
	)
	go func() {
		for {
			m := new(wrapperspb.BytesValue)
			err := stream.RecvMsg(m)
			if err == nil {
				err = conn.Send(ctx, m.Value)
				if err != nil {
					err = fmt.Errorf("sending to the server: %w", err)
				}
			}
			if err != nil {
				hostMu.Lock()
				hostErr = err
				hostMu.Unlock()
				conn.Close() // unblocks the Recv below
				return
			}
		}
	}()

	for {
		frame, err := conn.Recv(ctx)
		if err != nil {
			hostMu.Lock()
			he := hostErr
			hostMu.Unlock()
			switch {
			case he != nil && errors.Is(he, io.EOF):
				return nil // the host closed the connection
			case he != nil:
				return status.Error(codes.Unavailable, he.Error())
			case errors.Is(err, io.EOF):
				return nil // the server closed the connection
			case ctx.Err() != nil:
				return status.FromContextError(ctx.Err()).Err()
			}
			return status.Error(codes.Unavailable, err.Error())
		}
		if len(frame) == 0 {
			continue
		}
		if err := stream.SendMsg(&wrapperspb.BytesValue{Value: frame}); err != nil {
			return err
		}
	}
}
