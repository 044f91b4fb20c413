//! The cell's event bus: each event stamped with the cell's time, folded
//! into the recorder and handed to every sink.

use tokio::time::Instant;

use super::event::{Event, Sink};
use super::record::Recorder;

/// The cell's event bus: stamps each event with the cell's time and hands
/// it to the recorder and every sink.
pub struct Bus {
    cell: String,
    origin: Instant,
    pub recorder: Recorder,
    sinks: Vec<Box<dyn Sink>>,
}

impl Bus {
    pub fn new(cell: &str, origin: Instant) -> Bus {
        Bus {
            cell: cell.to_string(),
            origin,
            recorder: Recorder::default(),
            sinks: vec![],
        }
    }

    pub fn with(mut self, sink: impl Sink + 'static) -> Bus {
        self.sinks.push(Box::new(sink));
        self
    }

    /// Seconds since the cell started.
    pub fn t(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    pub fn emit(&mut self, e: Event) {
        let t = self.t();
        self.recorder.record(t, &e);
        for s in &mut self.sinks {
            s.event(&self.cell, t, &e);
        }
    }

    pub fn error(&mut self, text: impl Into<String>) {
        self.emit(Event::Error { text: text.into() });
    }

    pub fn notice(&mut self, what: &str, text: impl Into<String>) {
        self.emit(Event::Notice {
            what: what.into(),
            text: text.into(),
        });
    }
}
