//! `GET /ui/channels`: the alert channels ([`crate::channels::store`]),
//! with where each sends and whether it is valid. Credentials are hidden
//! unless the viewer may see them (signed in, or reads protected).

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use jetcron_core::access::Role;
use jetcron_core::channel::Channel;

use super::pages::{render, when_text, Frame};
use super::viewer::{ConsoleError, Viewer};
use crate::channels::requests::ListChannels;
use crate::GatewayState;

/// One channel as the table shows it.
pub struct ChannelLine {
    pub name: String,
    pub kind: String,
    pub destination: String,
    pub description: String,
    pub updated: String,
    pub problems: String,
}

#[derive(Template)]
#[template(path = "console/channels.html")]
pub struct ChannelsPage {
    pub frame: Frame,
    pub channels: Vec<ChannelLine>,
}

fn destination(channel: &Channel) -> (String, String) {
    match channel {
        Channel::Email(c) => (
            format!("{} via {}", c.to.join(", "), c.smtp_host),
            c.description.clone().unwrap_or_default(),
        ),
        Channel::Webhook(c) => (c.url.clone(), c.description.clone().unwrap_or_default()),
        Channel::Slack(c) | Channel::Wecom(c) => {
            (c.url.clone(), c.description.clone().unwrap_or_default())
        }
        Channel::Feishu(c) | Channel::Dingtalk(c) => {
            (c.url.clone(), c.description.clone().unwrap_or_default())
        }
    }
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read("/ui/channels")?;
    // Channels belong to no namespace; someone bound nowhere sees none.
    super::namespace_choice::choose(&viewer.caller().grants, Role::Viewer, "")?;
    let reply = state.channels.list(ListChannels {}).await?;
    let shows_secrets = viewer.sees_channel_secrets();
    let channels = reply
        .channels
        .into_iter()
        .map(|stored| {
            let stored = if shows_secrets {
                stored
            } else {
                stored.redacted()
            };
            let (destination, description) =
                stored.channel.as_ref().map(destination).unwrap_or_default();
            ChannelLine {
                kind: stored
                    .channel
                    .as_ref()
                    .map_or("invalid", |c| c.kind())
                    .to_string(),
                name: stored.name,
                destination,
                description,
                updated: when_text(&stored.updated_at),
                problems: stored
                    .problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        })
        .collect();
    let page = ChannelsPage {
        frame: viewer.frame("Alert channels"),
        channels,
    };
    Ok(render(&page).into_response())
}
