//! The request-response codec of the mesh's directed protocols: opaque bytes, a whole stream
//! each way, with hard size limits.

use std::io;

use futures::{AsyncReadExt, AsyncWriteExt};
use libp2p::StreamProtocol;
use libp2p::request_response;

/// Request-response codec of opaque bytes: a request (an envelope, a JSON request) and its
/// response are each the whole stream (no framing beyond end-of-stream), with hard size limits.
#[derive(Clone, Copy, Debug)]
pub struct BytesCodec {
    /// Largest request accepted.
    pub max_request: u64,
    /// Largest response accepted.
    pub max_response: u64,
}

async fn read_limited<T>(io: &mut T, limit: u64) -> io::Result<Vec<u8>>
where
    T: futures::AsyncRead + Unpin + Send,
{
    let mut out = Vec::new();
    io.take(limit + 1).read_to_end(&mut out).await?;
    if out.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message too large",
        ));
    }
    Ok(out)
}

impl request_response::Codec for BytesCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        read_limited(io, self.max_request).await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        read_limited(io, self.max_response).await
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        io.write_all(&req).await?;
        io.close().await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        io.write_all(&res).await?;
        io.close().await
    }
}
