//! gRPC over the byte stream (feature `grpc`): a tonic service served over a
//! `StreamListener` and called over a `Stream` connector, with one unary and one
//! server-streaming method. The service is written by hand against `tonic::codegen` and its
//! messages derive `prost::Message`, so no .proto build step (and no protoc) is needed.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{NamedService, ServerStreamingService, UnaryService};
use tonic::{Request, Response, Status};
use transport::stream::grpc::Connector;
use transport::stream::StreamListener;

use crate::stream::runtime;
use crate::support::*;

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    #[prost(uint32, tag = "2")]
    pub count: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    #[prost(uint32, tag = "2")]
    pub index: u32,
}

const UNARY: &str = "/rdma.Echo/Reverse";
const STREAMING: &str = "/rdma.Echo/Repeat";

/// Reverse: the bytes reversed. Repeat: `count` replies, reply i holding the data with i
/// appended.
#[derive(Clone, Debug, Default)]
struct EchoService;

struct Reverse;

impl UnaryService<EchoRequest> for Reverse {
    type Response = EchoReply;
    type Future = BoxFuture<Response<EchoReply>, Status>;

    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        Box::pin(async move {
            let mut data = request.into_inner().data;
            data.reverse();
            Ok(Response::new(EchoReply { data, index: 0 }))
        })
    }
}

type Replies = Pin<Box<dyn futures::Stream<Item = Result<EchoReply, Status>> + Send>>;

struct Repeat;

impl ServerStreamingService<EchoRequest> for Repeat {
    type Response = EchoReply;
    type ResponseStream = Replies;
    type Future = BoxFuture<Response<Replies>, Status>;

    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        Box::pin(async move {
            let EchoRequest { data, count } = request.into_inner();
            // The stream's item type is tonic's (Status is large by design).
            #[allow(clippy::result_large_err)]
            let replies = (0..count).map(move |i| {
                let mut d = data.clone();
                d.extend_from_slice(&i.to_le_bytes());
                Ok(EchoReply { data: d, index: i })
            });
            Ok(Response::new(
                Box::pin(futures::stream::iter(replies)) as Replies
            ))
        })
    }
}

impl<B> Service<http::Request<B>> for EchoService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let codec = tonic::codec::ProstCodec::<EchoReply, EchoRequest>::default();
        match req.uri().path() {
            UNARY => {
                Box::pin(
                    async move { Ok(tonic::server::Grpc::new(codec).unary(Reverse, req).await) },
                )
            }
            STREAMING => Box::pin(async move {
                Ok(tonic::server::Grpc::new(codec)
                    .server_streaming(Repeat, req)
                    .await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

impl NamedService for EchoService {
    const NAME: &'static str = "rdma.Echo";
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_tonic_service_answers_unary_and_server_streaming_calls_over_rdma_streams() {
    let rt = runtime();
    rt.block_on(async {
        let listener = StreamListener::bind(SocketAddr::new(peer_ip(), 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(EchoService)
                .serve_with_incoming_shutdown(listener.into_incoming(), async {
                    let _ = stopped.await;
                }),
        );
        let calls = async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect_with_connector(Connector::new(local_ip()))
                .await
                .expect("channel over the RDMA stream");
            let mut grpc = tonic::client::Grpc::new(channel);
            let codec = || tonic::codec::ProstCodec::<EchoRequest, EchoReply>::default();

            let data = pattern(1, 100_000);
            grpc.ready().await.unwrap();
            let reply = grpc
                .unary(
                    Request::new(EchoRequest {
                        data: data.clone(),
                        count: 0,
                    }),
                    http::uri::PathAndQuery::from_static(UNARY),
                    codec(),
                )
                .await
                .expect("unary call")
                .into_inner();
            let mut want = data;
            want.reverse();
            assert!(reply.data == want, "unary reply");

            let data = pattern(2, 3000);
            grpc.ready().await.unwrap();
            let mut replies = grpc
                .server_streaming(
                    Request::new(EchoRequest {
                        data: data.clone(),
                        count: 50,
                    }),
                    http::uri::PathAndQuery::from_static(STREAMING),
                    codec(),
                )
                .await
                .expect("server-streaming call")
                .into_inner();
            let mut n = 0u32;
            while let Some(r) = replies.message().await.expect("a reply") {
                assert_eq!(r.index, n);
                let mut want = data.clone();
                want.extend_from_slice(&n.to_le_bytes());
                assert!(r.data == want, "reply {n}");
                n += 1;
            }
            assert_eq!(n, 50, "replies of the stream");

            grpc.ready().await.unwrap();
            let e = grpc
                .unary::<_, EchoReply, _>(
                    Request::new(EchoRequest::default()),
                    http::uri::PathAndQuery::from_static("/rdma.Echo/Nothing"),
                    codec(),
                )
                .await
                .expect_err("an unknown method");
            assert_eq!(e.code(), tonic::Code::Unimplemented);
        };
        tokio::time::timeout(Duration::from_secs(120), calls)
            .await
            .expect("calls within 120 s");
        let _ = stop.send(());
        tokio::time::timeout(TIMEOUT, server)
            .await
            .expect("server stops")
            .unwrap()
            .expect("server");
    });
}
