"""Latent diffusion's data path: a VAE (diffusers' ``AutoencoderKL`` from a local folder), the
encoding of a prepared folder into the posterior's moments, training batches drawn from them,
and the decoding of generated latents (:mod:`.vae`, :mod:`.encode`, :mod:`.data`)."""

from timestep_lab.latents.data import LatentBank, LatentData, LatentLoader, is_latent_folder, open_training_data
from timestep_lab.latents.encode import encode_folder
from timestep_lab.latents.vae import DEFAULT_SCALING, VaeInfo, decode_latents, encode_moments, latent_decoder, load_vae, vae_info

__all__ = ["DEFAULT_SCALING", "LatentBank", "LatentData", "LatentLoader", "VaeInfo", "decode_latents", "encode_folder",
           "encode_moments", "is_latent_folder", "latent_decoder", "load_vae", "open_training_data", "vae_info"]
