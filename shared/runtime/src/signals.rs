//! Shutdown signals.

/// A future that resolves on SIGTERM or SIGINT. The handlers are installed when this function
/// is called, not when the future is first polled, so a signal that arrives between start-up and
/// the first `.await` is not lost.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static>
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}
