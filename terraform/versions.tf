terraform {
  # 1.9 is the first release whose variable validations may refer to other variables.
  required_version = ">= 1.9"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 8.0"
    }
    # The console's Cloud Run service with IAP (console.tf): iap_enabled and the IAP grants on a Cloud Run service.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.36, < 8.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
    time = {
      source  = "hashicorp/time"
      version = ">= 0.9, < 1.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
}

provider "google-beta" {
  project = var.project
  region  = var.region
}
